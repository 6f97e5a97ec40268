"""SDK defaults, in one place."""

GATEWAY_URL = "http://127.0.0.1:8000/v1"
#: A request with this header set to "off" is not captured by the gateway (`server._capture`).
CAPTURE_HEADER = "X-Looplift-Capture"
COLLECTOR_URL = "http://127.0.0.1:8100"
MODEL = "policy"
MAX_STEPS = 8
CONCURRENCY = 8
TEMPERATURE = 1.0
MAX_TOKENS = 128
REQUEST_TIMEOUT_S = 120.0
COLLECTOR_BATCH = 64
COLLECTOR_FLUSH_S = 0.5
COLLECTOR_TIMEOUT_S = 5.0
#: Request header naming the episode (the trajectory id): the gateway keeps a session on one version during a
#: canary, and capture stitches a session's turns into one trajectory.
SESSION_HEADER = "X-Looplift-Session"
