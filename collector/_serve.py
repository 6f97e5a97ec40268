"""Run the collector app with uvicorn in a background thread (tests, `looplift up`).

The thread's server installs no signal handlers, so the host process keeps its own Ctrl+C
behaviour. Deliberately not a process supervisor: one server, one thread, stopped by `.stop()`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn
from typing_extensions import Self

from . import _defaults
from ._app import create_app
from ._settings import CollectorSettings
from .errors import CollectorError


class _ThreadServer(uvicorn.Server):
    # Signal handlers can only be installed from the main thread, and the host owns them anyway.
    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # uvicorn >= 0.29
        yield


class ServerHandle:
    """A running collector: `.url` to reach it, `.stop()` (or `with`) to shut it down."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread (in-flight requests finish first)."""
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


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
        CollectorError: the server did not start within `startup_timeout` seconds.
    """
    app = create_app(settings)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
    server = _ThreadServer(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run()
        except BaseException as e:  # noqa: BLE001 - reported to the caller below
            failure.append(e)

    thread = threading.Thread(target=run, name=f"collector-{host}:{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if failure or not thread.is_alive():
            raise CollectorError(
                f"the collector could not start on {host}:{port}: {failure[0] if failure else 'server exited'}; "
                "is the port already in use? pass port=0 to pick a free one"
            )
        if time.monotonic() > deadline:
            server.should_exit = True
            raise CollectorError(f"the collector did not start on {host}:{port} within {startup_timeout} s")
        time.sleep(0.01)
    bound = port
    for srv in getattr(server, "servers", []):
        for sock in srv.sockets:
            bound = sock.getsockname()[1]
            break
    return ServerHandle(server, thread, host, bound)
