"""Run the gateway in a background thread (for `looplift up`, `looplift server start`, the demo, tests).

`start_gateway_in_thread` is `sdk.infra.start_server_thread` for the gateway app: port 0 works, the real
port is known before it returns, TCP_NODELAY is on, and the event loop is uvloop where it is installed.
It does not start vLLM; see `_vllm.start_vllm`.
"""

from __future__ import annotations

from typing import Sequence, Union

from sdk.infra import ServerThread, ServerThreadError, start_server_thread

from . import _defaults as D
from ._auth import check_bind
from ._gateway import Gateway, create_gateway
from ._replicas import Source
from ._settings import GatewaySettings
from .errors import GatewayStartError


class GatewayHandle(ServerThread):
    """A gateway running in a background thread. `stop()` is idempotent."""

    def __init__(self, thread: ServerThread, app: Gateway) -> None:
        super().__init__(thread._server, thread._thread, thread.host, thread.port)
        #: The gateway app (`app.registry` is the live registry).
        self.app = app

    def __enter__(self) -> "GatewayHandle":
        return self


def start_gateway_in_thread(
    settings: GatewaySettings,
    vllm_url: Union[Source, Sequence[Source]],
    host: str = D.HOST,
    port: int = D.GATEWAY_PORT,
    *,
    start_timeout_s: float = 30.0,
    log_level: str = "warning",
    insecure: bool = False,
) -> GatewayHandle:
    """Start the gateway for the vLLM at `vllm_url` (or several: URLs and `LocalReplica`s) on `host:port`
    (0 = a free port) and wait until it serves. A non-loopback `host` without API keys is refused
    (`InsecureBindError`, see `_auth.check_bind`) unless `insecure`."""
    check_bind(host, settings.api_keys, insecure=insecure)
    app = create_gateway(settings, vllm_url)
    try:
        thread = start_server_thread(app, host, port, name="gateway", start_timeout_s=start_timeout_s,
                                     log_level=log_level, graceful_shutdown_s=int(D.REQUEST_TIMEOUT_S),
                                     fast_loop=True)
    except ServerThreadError as e:
        raise GatewayStartError(f"{e}; pick another --port or stop what uses it") from None
    return GatewayHandle(thread, app)
