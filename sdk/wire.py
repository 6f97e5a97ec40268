"""The wire contract: every name that crosses a process boundary between looplift's parts, defined once.

The SDK, the gateway (`server`), the collector and the trainer run as separate processes, often on separate
machines and at separate versions; they agree only on what is written here. A header or metadata key typed
as a literal anywhere else can drift from its reader without a test noticing, so every package imports it
from this module (the one layer all of them may import).

Request headers (canonical spelling; HTTP header names are case-insensitive)
---------------------------------------------------------------------------

`X-Looplift-Session` (`SESSION_HEADER`)
    Sent by: `sdk.run` / `sdk.arun` with every model request (value: the trajectory id); any application
    that wants one episode treated as one conversation. Read by: the gateway, which keeps a session on one
    version while a canary runs (`server._canary`), on one vLLM replica while it is healthy
    (`server._replicas`), and stitches a session's exchanges into one captured trajectory
    (`server._capture_build`).
`X-Looplift-App` (`APP_HEADER`)
    Sent by: `sdk.run` / `sdk.arun` (their `app`, when it is printable ASCII); applications. Read by: gateway
    capture, as the captured trajectory's `app` (`GatewaySettings.capture_app` without it).
`X-Looplift-Task` (`TASK_HEADER`)
    Sent by: applications that know their task id (the SDK records its own episodes and does not send it).
    Read by: gateway capture, as the trajectory's `task_id` (else a hash of the opening messages).
`X-Looplift-Capture: off` (`CAPTURE_HEADER`, `CAPTURE_OFF`)
    Sent by: the SDK when it has a collector (it records the episode itself, with its outcome), and the
    trainer's eval gate (eval traffic must never become training data). Read by: gateway capture, which
    then does not capture the exchange.
`Authorization: Bearer <token>` (parsed by `bearer_token`)
    The gateway's client API keys (`/v1/*`) and admin token (`/admin/*`), the collector's ingest keys
    (`/v1/trajectories`, `/v1/feedback`) and the dashboard's admin token (`/v1/dashboard/*`).
`X-API-Key` (`API_KEY_HEADER`)
    Read by: the collector, as an alternative to `Authorization: Bearer` for its ingest keys.

Response headers (sent by the gateway on `/v1/chat/completions` and `/v1/completions`)
--------------------------------------------------------------------------------------

`X-Looplift-Version` (`VERSION_HEADER`)
    The version that answered (an alias request names the alias, the header names the version). Read by:
    clients and tests that check which version served them.
`X-Looplift-Replica` (`REPLICA_HEADER`)
    The vLLM replica that answered (its URL), when the gateway spreads over replicas. Read by: operators and
    tests.
`X-Looplift-Generation-Config` (`GENERATION_CONFIG_HEADER`)
    The `--generation-config` of the vLLMs behind the gateway (`GatewaySettings.generation_config`: "vllm",
    "auto", or a directory; left out when it is not printable ASCII): which defaults vLLM filled in for the
    sampling parameters a request left out. Read by: `sdk.run` / `sdk.arun`, into each turn's
    `TurnTokens.sampling` (`SamplingRecord.generation_config`; None without the header).

Trajectory metadata keys (`Trajectory.metadata`)
------------------------------------------------

Written by gateway capture (`server._capture_build`) on every trajectory it builds; read as noted:

`source` (`SOURCE_KEY`)
    `"gateway"` (`SOURCE_GATEWAY`) for a captured trajectory.
`response_ids` (`RESPONSE_IDS_KEY`)
    The `id` of every chat completion the trajectory holds, as the client received it. The collector links
    each to the trajectory (`collector._capture_rows`), so feedback may name a completion (`response_id`).
`looplift_revision` (`REVISION_KEY`)
    Present on a session's trajectory (value: its message count): the gateway re-sends it under the same id
    as the session grows, and the collector replaces a stored one that has fewer messages.
`exchanges` (`EXCHANGES_KEY`)
    One record per exchange: `response_id`, `message_index` (the index in the trajectory's `messages` of the
    assistant message the exchange produced; absent from captures made before looplift recorded it),
    `latency_ms`, `stream`, `finish_reason`, `usage`, `at` (ISO time). The collector's export reads
    `response_id` and `message_index` to put a correction sent by response id in place of that message.
`usage` (`USAGE_KEY`)
    The exchanges' token usage, summed per field.
`key_id` (`KEY_ID_KEY`)
    The public id of the API key that sent the requests (`server.key_id`); only with keys configured. The
    collector can purge one key's data by it (`collector purge --where key_id=k-...`).
`session` (`SESSION_KEY`)
    The `X-Looplift-Session` value, when one was sent.
`tools` (`TOOLS_KEY`)
    The request's tool definitions, when it had any. The collector's SFT export writes them to each line.
`alternatives` (`ALTERNATIVES_KEY`)
    With `n > 1`, the other choices (`content`, `tool_calls`, `finish_reason`); the first is the reply.

Written by the collector's anonymizer:

`looplift_token_ids_redacted` (`TOKEN_IDS_REDACTED_KEY`)
    True when the anonymizer replaced text of the trajectory and dropped its token ids and logprobs with it
    (they would encode the original text); training then re-tokenizes the messages.

Errors
------

Every HTTP API answers errors in the shape the OpenAI clients parse (`error_body`):
`{"error": {"message": str, "type": str, "param": str | null, "code": str | int | null}}`. `message` says
what was wrong and how to fix it; `code` is a stable name to branch on. Some answers add fields next to
`error` (the collector's 422 lists every invalid field under `errors`); clients must ignore fields they do
not know. `error_message` reads the message back; `ErrorBody` is the same shape as a pydantic model, which the
services' OpenAPI documents name for every error status they answer.
"""

from __future__ import annotations

from typing import Any

import pydantic

__all__ = [
    "ALTERNATIVES_KEY",
    "API_KEY_HEADER",
    "APP_HEADER",
    "CAPTURE_HEADER",
    "CAPTURE_OFF",
    "EXCHANGES_KEY",
    "GENERATION_CONFIG_HEADER",
    "KEY_ID_KEY",
    "REPLICA_HEADER",
    "RESPONSE_IDS_KEY",
    "REVISION_KEY",
    "SESSION_HEADER",
    "SESSION_KEY",
    "SOURCE_GATEWAY",
    "SOURCE_KEY",
    "TASK_HEADER",
    "TOKEN_IDS_REDACTED_KEY",
    "TOOLS_KEY",
    "USAGE_KEY",
    "total_usage",
    "VERSION_HEADER",
    "ErrorBody",
    "ErrorDetail",
    "asgi_header",
    "bearer_token",
    "error_body",
    "error_message",
]

# ---- headers ---------------------------------------------------------------------------------------
SESSION_HEADER = "X-Looplift-Session"
APP_HEADER = "X-Looplift-App"
TASK_HEADER = "X-Looplift-Task"
CAPTURE_HEADER = "X-Looplift-Capture"
#: The `CAPTURE_HEADER` value that turns capture off for a request (compared case-insensitively).
CAPTURE_OFF = "off"
VERSION_HEADER = "X-Looplift-Version"
REPLICA_HEADER = "X-Looplift-Replica"
GENERATION_CONFIG_HEADER = "X-Looplift-Generation-Config"
API_KEY_HEADER = "X-API-Key"

# ---- trajectory metadata keys ---------------------------------------------------------------------------
SOURCE_KEY = "source"
SOURCE_GATEWAY = "gateway"
RESPONSE_IDS_KEY = "response_ids"
REVISION_KEY = "looplift_revision"
EXCHANGES_KEY = "exchanges"
USAGE_KEY = "usage"
KEY_ID_KEY = "key_id"
SESSION_KEY = "session"
TOOLS_KEY = "tools"
ALTERNATIVES_KEY = "alternatives"
TOKEN_IDS_REDACTED_KEY = "looplift_token_ids_redacted"


def total_usage(exchanges: list[dict[str, Any]]) -> dict[str, int]:
    """The `usage` total of a captured trajectory: its exchanges' integer usage fields summed."""
    total: dict[str, int] = {}
    for e in exchanges:
        for k, v in (e.get("usage") or {}).items():
            if isinstance(v, int) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total


def asgi_header(name: str) -> bytes:
    """`name` as an ASGI scope carries header names (lowercase latin-1 bytes), for code that reads the scope
    directly instead of through a framework (the gateway's hot path)."""
    return name.lower().encode("latin-1")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value (scheme case-insensitive), else None."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def error_body(status: int, message: str, *, code: str | int | None = None, param: str | None = None) -> dict[str, Any]:
    """The OpenAI-shaped error body for an answer with HTTP `status`: `type` is `invalid_request_error` for a
    4xx, `server_error` for a 5xx (what the OpenAI API itself sends)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ErrorDetail(pydantic.BaseModel):
    """The `error` object of an `ErrorBody`."""

    message: str = pydantic.Field(description="what was wrong and how to fix it")
    type: str = pydantic.Field(description="`invalid_request_error` for a 4xx, `server_error` for a 5xx")
    param: str | None = pydantic.Field(description="the request field at fault, when one is")
    code: str | int | None = pydantic.Field(description="a stable name to branch on")


class ErrorBody(pydantic.BaseModel):
    """Every looplift HTTP error answer (`error_body`); an answer may add fields next to `error`."""

    error: ErrorDetail


def error_message(body: Any) -> str | None:
    """The `message` of an `error_body`-shaped answer (parsed JSON), or None when `body` has another shape."""
    err = body.get("error") if isinstance(body, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    return message if isinstance(message, str) and message else None
