"""SDK defaults, in one place (header names and other wire names are in `sdk.wire`)."""

GATEWAY_URL = "http://127.0.0.1:8000/v1"
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
