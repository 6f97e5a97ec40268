"""Every default of the `server` package, in one place.

Only constants live here: no logic, no imports of heavy modules. CLI flags, `VLLMConfig` and
`GatewaySettings` read their defaults from this module so that one edit changes them everywhere.
"""

from __future__ import annotations

# --- naming -------------------------------------------------------------------------------
#: The alias clients ask for; it always names the version being served.
ALIAS = "policy"
#: Versions are named `<alias>-v<N>`; `<alias>-v0` is the base model vLLM serves itself.
VERSION_SUFFIX = "-v"

# --- state --------------------------------------------------------------------------------
#: Environment variable holding the state directory (everything a run writes lives under it).
HOME_ENV = "LOOPLIFT_HOME"
#: Used when `LOOPLIFT_HOME` is unset.
HOME_FALLBACK = "~/.looplift"
#: Admin token env var; when unset a token is generated once and kept in `$LOOPLIFT_HOME/admin.token`.
ADMIN_TOKEN_ENV = "LOOPLIFT_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "admin.token"
#: Comma-separated client API keys; empty means `/v1` needs no key.
API_KEYS_ENV = "LOOPLIFT_API_KEYS"
#: Capture on (1/true), and the ids of API keys whose traffic is captured anyway (comma-separated `k-...`).
CAPTURE_ENV = "LOOPLIFT_CAPTURE"
CAPTURE_KEYS_ENV = "LOOPLIFT_CAPTURE_KEYS"
#: The collector the gateway's capture and feedback talk to, and its ingest key.
COLLECTOR_URL_ENV = "LOOPLIFT_COLLECTOR_URL"
COLLECTOR_KEY_ENV = "LOOPLIFT_COLLECTOR_KEY"
COLLECTOR_KEY_FILE = "collector.key"
#: Gateway state lives in `$LOOPLIFT_HOME/<STATE_SUBDIR>/registry.json`.
STATE_SUBDIR = "server"
REGISTRY_FILE = "registry.json"
#: vLLM logs go to `$LOOPLIFT_HOME/<LOG_SUBDIR>/`.
LOG_SUBDIR = "logs"

# --- vLLM ---------------------------------------------------------------------------------
HOST = "127.0.0.1"
GATEWAY_PORT = 8000
#: 0 picks a free port.
VLLM_PORT = 0
#: float32 on the CPU build (bf16 kernels are slow or missing there); "auto" on a GPU.
CPU_DTYPE = "float32"
GPU_DTYPE = "auto"
MAX_MODEL_LEN = 512
#: vLLM only accepts LoRA ranks from a fixed set (1, 8, 16, 32, 64, ...).
MAX_LORA_RANK = 8
MAX_LORAS = 4
#: vLLM `--tool-call-parser`: "auto" reads it from the model's chat template (`_tools`).
TOOL_CALL_PARSER = "auto"
#: vLLM `--generation-config`: "vllm" samples a parameter a request leaves out with vLLM's neutral default
#: (temperature 1, top_p 1, no top_k / min_p / penalties), not the model's generation_config.json.
GENERATION_CONFIG = "vllm"
#: `VLLM_CPU_KVCACHE_SPACE`, GiB; ignored on a GPU.
CPU_KVCACHE_GIB = 1.0
#: vLLM CPU takes ~40 s to become healthy on the 2-core dev machine; leave ample headroom.
VLLM_START_TIMEOUT_S = 300.0
#: Seconds between SIGTERM and SIGKILL when stopping vLLM. A healthy vLLM 0.32 CPU exits ~2 s after SIGTERM;
#: one that gets SIGTERM while its engine initializes never exits, so the grace only bounds the wait.
#: It also bounds how long vLLM outlives a killed parent.
VLLM_STOP_GRACE_S = 10.0
#: The same when a start is aborted (timeout, exit, signal): a loading vLLM exits within ~0.5 s or never.
VLLM_ABORT_GRACE_S = 3.0
#: After a start timed out: how long the hung processes get to write their stacks into the log.
VLLM_STACK_DUMP_WAIT_S = 3.0
#: Lines of the vLLM log quoted in a `VLLMStartError`.
LOG_TAIL_LINES = 40

# --- gateway ------------------------------------------------------------------------------
#: Upper bound for one upstream request (a long generation on the CPU can take minutes).
REQUEST_TIMEOUT_S = 300.0
#: Upstream connect timeout; vLLM is on loopback, so a slow connect means it is gone.
CONNECT_TIMEOUT_S = 5.0
#: `/health` asks vLLM with this timeout.
HEALTH_TIMEOUT_S = 5.0
#: Idle upstream connections are dropped after this long: below vLLM's keep-alive timeout (uvicorn's 5 s),
#: so the gateway never reuses a connection vLLM is about to close.
UPSTREAM_KEEPALIVE_S = 4.0
#: Seconds between `/health` checks of each replica when the gateway has several (a replica that fails a
#: request is taken out at once; this bounds how soon a dead-but-idle one is noticed and a back one rejoins).
REPLICA_HEALTH_INTERVAL_S = 1.0
#: Sessions (`X-Looplift-Session`) whose replica the gateway remembers, least recently used dropped first.
SESSION_AFFINITY_MAX = 10_000
# --- capture ------------------------------------------------------------------------------
#: App of captured trajectories when the client sends no `X-Looplift-App`.
CAPTURE_APP = "default"
#: Captured exchanges the worker may fall behind by before new ones are dropped.
CAPTURE_QUEUE = 10_000
#: Longest an answer's last bytes wait for its capture to be journaled (`_capture.Capture.seal`).
SEAL_TIMEOUT_S = 1.0
#: Captured trajectories spool under `$LOOPLIFT_HOME/<STATE_SUBDIR>/<CAPTURE_SPOOL_SUBDIR>` while the collector is down.
CAPTURE_SPOOL_SUBDIR = "capture-spool"

#: Admin client default.
GATEWAY_URL = f"http://{HOST}:{GATEWAY_PORT}"
#: Long enough for a promote of a full-weight version, which starts and warms a vLLM set before answering.
ADMIN_TIMEOUT_S = VLLM_START_TIMEOUT_S + 60.0
