"""Run the collector app in a background thread (tests, `looplift up`, the demo).

`serve_in_thread` is `sdk.infra.start_server_thread` for the collector app. Deliberately not a process
supervisor: one server, one thread, stopped by `.stop()`; `collector serve --workers N` runs processes.
"""

from __future__ import annotations

from sdk.infra import ServerThread, ServerThreadError, start_server_thread

from . import _defaults
from ._app import create_app
from ._settings import CollectorSettings
from .errors import CollectorError

#: A running collector: `.url` to reach it, `.stop()` (or `with`) to shut it down.
ServerHandle = ServerThread


def serve_in_thread(
    settings: CollectorSettings | None = None,
    host: str = _defaults.DEFAULT_HOST,
    port: int = 0,
    *,
    startup_timeout: float = 30.0,
) -> ServerHandle:
    """Start the collector on `host:port` in a daemon thread and return once it accepts requests.

    Args:
        settings: collector configuration (`CollectorSettings.from_env()` when None).
        host: interface to bind; keep the loopback default unless it must be reachable elsewhere.
        port: TCP port; 0 picks a free one (read it back from `handle.port` / `handle.url`).

    Raises:
        CollectorError: the port is taken or the server did not start within `startup_timeout` seconds.
    """
    app = create_app(settings)
    try:
        return start_server_thread(app, host, port, name="collector", start_timeout_s=startup_timeout)
    except ServerThreadError as e:
        raise CollectorError(f"the collector could not start: {e}; pass port=0 to pick a free one") from None
