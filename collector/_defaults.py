"""Every default the collector uses, in one place (docs/contributing.md, house style 3).

Nothing here reads the environment at import time; `CollectorSettings.from_env()` does that.
"""

from __future__ import annotations

#: Environment variable naming the state directory (db, models, adapters, spool live under it).
ENV_HOME = "LOOPLIFT_HOME"
#: Environment variable overriding the database URL.
ENV_DB = "LOOPLIFT_COLLECTOR_DB"
#: Environment variable holding the accepted API keys, comma-separated.
ENV_KEYS = "LOOPLIFT_COLLECTOR_KEYS"
#: Environment variable choosing what replaces PII: placeholder (default), hmac or fake.
ENV_ANONYMIZE_MODE = "LOOPLIFT_COLLECTOR_ANONYMIZE_MODE"
#: Environment variable holding the key for hmac/fake pseudonyms (else $LOOPLIFT_HOME/collector_pseudonym.key).
ENV_PSEUDONYM_KEY = "LOOPLIFT_COLLECTOR_PSEUDONYM_KEY"

#: State directory when `LOOPLIFT_HOME` is unset.
DEFAULT_HOME = "~/.looplift"
#: SQLite file name under the state directory.
DB_FILENAME = "collector.db"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8100
#: `serve --workers N`: seconds uvicorn's supervisor waits for a worker to answer its health ping before it
#: SIGKILLs and replaces it (uvicorn's own default is 5). A worker answers only once it has imported the
#: collector, 3.5-5 s on two busy cores, so 5 s killed starting workers over and over (`_cli.serve`).
WORKER_HEALTHCHECK_S = 30

#: Largest accepted request body. 16 MiB holds ~1000 trajectories of ~16 KB; bigger batches
#: should be split by the client rather than buffered whole in the collector.
MAX_BODY_BYTES = 16 * 1024 * 1024

#: How long a SQLite writer waits for the lock before failing. Several ingest workers (or an
#: export running beside ingest) contend for SQLite's single writer; 10 s absorbs bursts.
SQLITE_BUSY_TIMEOUT_MS = 10_000

#: Trajectories deleted per transaction by `collector purge`: short enough that ingest never
#: waits long for SQLite's write lock, large enough that the per-transaction cost is amortized.
PURGE_BATCH_SIZE = 2000

#: Alembic's bookkeeping table. Named for the collector so that other components can keep their
#: own migrations in the same Postgres database without fighting over `alembic_version`.
ALEMBIC_VERSION_TABLE = "collector_alembic_version"

#: Rows fetched per page while exporting; bounds memory whatever the table size.
EXPORT_BATCH_SIZE = 500

#: Export formats (`collector export --format`): chat SFT, DPO pairs, GRPO groups.
EXPORT_FORMATS = ("sft", "dpo", "grpo")

#: Near-duplicate detection (`_dedup.py`): MinHash permutations, LSH bands (rows = perms / bands)
#: and word-shingle length. 16 bands of 8 put the 50% detection point near Jaccard 0.7.
MINHASH_PERMS = 128
MINHASH_BANDS = 16
MINHASH_SHINGLE = 5

#: Decontamination: word n-gram length compared against the eval file (GPT-3's choice).
DECONTAM_NGRAM = 13
#: Eval texts shorter than the n-gram count whole, from this many words (shorter ones match anything).
DECONTAM_MIN_WORDS = 8

#: DPO/GRPO read each task's trajectories as one group, at most this many at a time (bounds memory
#: whatever a task's size; a bigger task is processed in consecutive chunks of this size).
MAX_GROUP = 256

#: Quality model (`_quality.py`): share of tasks held out for its AUC, the fewest labeled
#: trajectories (with both outcomes) worth fitting on, and the most recent ones it trains on.
QUALITY_HOLDOUT = 0.2
QUALITY_MIN_LABELED = 20
QUALITY_MAX_TRAIN = 20_000

#: Diversity clusters (`_cluster.py`): k, the most rows sampled to fit them, hashed text features.
CLUSTERS = 16
CLUSTER_FIT_ROWS = 20_000
CLUSTER_FEATURES = 2**12

#: Rows rescored per transaction by `collector score`.
SCORE_BATCH_SIZE = 1000

# -- observability (`_langfuse.py`, `_dashboard.py`) ----------------------------------------------

#: The Langfuse SDK's own settings: the export to Langfuse is on when both keys are set.
ENV_LANGFUSE_PUBLIC_KEY = "LANGFUSE_PUBLIC_KEY"
ENV_LANGFUSE_SECRET_KEY = "LANGFUSE_SECRET_KEY"
ENV_LANGFUSE_HOST = "LANGFUSE_HOST"
#: Newer Langfuse SDKs read this instead of LANGFUSE_HOST; either works.
ENV_LANGFUSE_BASE_URL = "LANGFUSE_BASE_URL"
#: `off` turns the Langfuse export off even when the keys are set (they may be there for another app).
ENV_LANGFUSE_EXPORT = "LOOPLIFT_COLLECTOR_LANGFUSE"
#: Trajectories and feedback waiting for the Langfuse exporter; past this they are dropped and counted
#: (ingest never waits for Langfuse).
LANGFUSE_QUEUE = 1000
#: Longest text (characters) of one input/output field sent to Langfuse; longer ones are cut and marked.
LANGFUSE_MAX_FIELD_CHARS = 20_000

#: The operators' token (the gateway's admin token): the dashboard's data endpoints need it.
ENV_ADMIN_TOKEN = "LOOPLIFT_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin.token"
#: The gateway the dashboard reads versions, swaps and health from (its admin API needs the admin token).
ENV_GATEWAY_URL = "LOOPLIFT_GATEWAY_URL"
#: Seconds the dashboard waits for the gateway before it shows it as unreachable.
GATEWAY_TIMEOUT_S = 3.0
#: Newest trajectories whose steps the dashboard reads for sandbox/model latency figures.
LATENCY_SAMPLE = 500
