"""Default values for the trainer package, in one place (STYLE 3).

Every default a config field, a `looplift.toml` key or a CLI flag falls back to lives here, so that
changing one changes it everywhere. Nothing in this module has behaviour.
"""

from __future__ import annotations

#: Gateway the retrain job loads candidates into and promotes on.
GATEWAY_URL = "http://127.0.0.1:8000"
#: The alias that names the serving version.
ALIAS = "policy"

# ---- the retrain job ---------------------------------------------------------------------------
#: Rejection sampling: only trajectories with at least this reward are trained on.
MIN_REWARD = 1.0
#: A run with fewer exported examples is skipped.
MIN_EXAMPLES = 8
#: The training algorithm (a name in `TRAIN_STEPS` or `PKG.MODULE:ATTR`).
ALGO = "sft"
#: Episodes of the eval suite run at once against the gateway.
EVAL_CONCURRENCY = 16
#: Processes the train stage runs on (more than one: under torchrun, one per device).
NPROC = 1
#: How a model is spread over those processes: "ddp" (a replica each) or "fsdp" (sharded).
STRATEGY = "ddp"
#: Sampling seed of the gate when the suite's `Sampling.seed` is None (a paired test needs seeds).
EVAL_SEED = 0

# ---- the gate ----------------------------------------------------------------------------------
#: One-sided significance level of the exact McNemar test. On 100 held-out tasks a candidate that is
#: better on 5 discordant pairs and worse on none (p = 1/32) promotes; 93% vs 92% (p >= 0.5) does not.
GATE_ALPHA = 0.05
#: A declared slice may lose at most this much success rate (absolute, 0-1) for a promotion.
GATE_SLICE_TOLERANCE = 0.05
#: The task-data key that names a task's slice (`EvalSuite.slice_key`).
SLICE_KEY = "slice"
#: The slice of a task that names none.
DEFAULT_SLICE = "all"

# ---- the scheduler -----------------------------------------------------------------------------
#: Seconds between two looks at the triggers.
POLL_S = 30.0
#: Window over which the serving version's live success is measured for the drift trigger (seconds).
DRIFT_WINDOW_S = 24 * 3600.0
#: Fewer live episodes than this in the window: no drift decision (too noisy).
DRIFT_MIN_EPISODES = 30

# ---- files -------------------------------------------------------------------------------------
#: The config file `trainer` and `looplift up` read (from the CWD, then `$LOOPLIFT_HOME`).
CONFIG_FILENAME = "looplift.toml"
#: Environment variable naming a config file explicitly.
CONFIG_ENV = "LOOPLIFT_CONFIG"

# ---- prompt suites -----------------------------------------------------------------------------
#: Completion tokens per turn in a prompt-only suite built from held-out data.
PROMPT_MAX_TOKENS = 128

# ---- the canary watch ----------------------------------------------------------------------------
#: One-sided level of the live exact Fisher test: promote when the candidate is better with p <= this,
#: drop when it is worse with p <= this.
CANARY_ALPHA = 0.05
#: Live episodes (with a verifier outcome, else with a rating) each side needs before any canary decision.
CANARY_MIN_SAMPLES = 30
#: Once both sides have this many episodes and neither test decided, the candidate is dropped (not shown
#: better live; the serving version stays).
CANARY_MAX_SAMPLES = 400
#: After a promotion, how long (seconds) its live signal is watched for an automatic rollback.
CANARY_WATCH_S = 3600.0
#: Live episodes after the promotion before the watch may roll back.
CANARY_WATCH_MIN_SAMPLES = 30
#: Roll back when live success falls more than this (absolute, 0-1) below the gate's measurement.
CANARY_WATCH_TOLERANCE = 0.10
#: Seconds between two looks of `trainer canary watch`.
CANARY_POLL_S = 15.0
