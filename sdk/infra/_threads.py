"""A uvicorn server in a background thread: the one way the gateway, the collector and the tests run an
ASGI app in-process.

`start_server_thread(app, host, port)` binds the socket itself (so port 0 works and the real port is
known before it returns), sets TCP_NODELAY on accepted connections, runs uvicorn on its own event loop
in a daemon thread, and returns once the app has started. The server installs no signal handlers: the
host process owns them. Deliberately not a process supervisor: one server, one thread, `.stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional


class ServerThreadError(RuntimeError):
    """The server could not bind its address or did not start in time; the message says which."""


class ServerThread:
    """A running in-process server. `.url` to reach it, `.stop()` (idempotent, or `with`) to end it."""

    def __init__(self, server: Any, thread: threading.Thread, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """Base URL, e.g. `http://127.0.0.1:8000`."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask uvicorn to exit (in-flight requests get `timeout` seconds to finish), then join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(5)

    def __enter__(self) -> "ServerThread":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_class() -> Any:
    import uvicorn

    class _Quiet(uvicorn.Server):
        # Signal handlers can only be installed from the main thread, and the host owns them anyway.
        def install_signal_handlers(self) -> None:  # uvicorn < 0.29
            pass

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # uvicorn >= 0.29
            yield

    return _Quiet


def _loop_factory(fast: bool) -> Optional[Callable[[], asyncio.AbstractEventLoop]]:
    if not fast:
        return None
    try:
        import uvloop
    except ImportError:  # not installed (e.g. Windows): the standard loop serves the same, slower
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def start_server_thread(
    app: Any,
    host: str,
    port: int,
    *,
    name: str = "server",
    start_timeout_s: float = 30.0,
    log_level: str = "warning",
    graceful_shutdown_s: Optional[int] = None,
    fast_loop: bool = False,
) -> ServerThread:
    """Serve the ASGI `app` on `host:port` (0 = a free port) in a daemon thread; return once it serves.

    `fast_loop` runs the server on uvloop when it is installed (the gateway's hot path spends noticeably less
    CPU per request there); otherwise, and by default, on asyncio's own loop.
    Raises `ServerThreadError` naming the address when the port cannot be bound or the app fails to start.
    """
    import uvicorn

    # proto must be IPPROTO_TCP (not 0): asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServerThreadError(f"cannot listen on {host}:{port} ({e.strerror})") from None
    real_port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", loop="asyncio", access_log=False,
                            timeout_graceful_shutdown=graceful_shutdown_s)
    server = _server_class()(config)
    errors: list[BaseException] = []
    loop_factory = _loop_factory(fast_loop)

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                runner.run(server.serve(sockets=[sock]))
        except BaseException as e:  # noqa: BLE001 - surfaced to the caller below; a thread cannot raise into it
            errors.append(e)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"{name}-{real_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(5)
            why = repr(errors[0]) if errors else "it did not start in time"
            raise ServerThreadError(f"the {name} on {host}:{real_port} failed to start: {why}")
        time.sleep(0.01)
    return ServerThread(server, thread, host, real_port)
