"""Run the gateway in a background thread (for `looplift up`, `looplift server start`, the demo, tests).

`start_gateway_in_thread` binds the socket itself (so port 0 works and the real port is known before
returning), runs a `uvicorn.Server` on its own event loop in a daemon thread, and returns once the
app has started. It does not start vLLM; see `_vllm.start_vllm`.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from . import _defaults as D
from ._gateway import create_gateway
from ._settings import GatewaySettings
from .errors import GatewayStartError


class GatewayHandle:
    """A gateway running in a background thread. `stop()` is idempotent."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, app: FastAPI, host: str, port: int) -> None:
        self._server = server
        self._thread = thread
        #: The FastAPI app (its `state.registry` is the live registry).
        self.app = app
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """Base URL without `/v1`, e.g. `http://127.0.0.1:8000`."""
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask uvicorn to exit (in-flight requests get `timeout` seconds to finish) and join the thread."""
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(5)

    def __enter__(self) -> "GatewayHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_gateway_in_thread(
    settings: GatewaySettings,
    vllm_url: str,
    host: str = D.HOST,
    port: int = D.GATEWAY_PORT,
    *,
    start_timeout_s: float = 30.0,
    log_level: str = "warning",
) -> GatewayHandle:
    """Start the gateway for the vLLM at `vllm_url` on `host:port` (0 = a free port) and wait until it serves."""
    app = create_gateway(settings, vllm_url)
    # proto must be IPPROTO_TCP (not 0): asyncio only sets TCP_NODELAY on accepted sockets whose
    # proto says TCP, and without it Nagle + delayed ACK add ~40 ms to every response.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise GatewayStartError(
            f"cannot listen on {host}:{port} ({e.strerror}); pick another --port or stop what uses it."
        ) from None
    real_port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app, log_level=log_level, lifespan="on", loop="asyncio", timeout_graceful_shutdown=int(D.REQUEST_TIMEOUT_S),
    )
    server = uvicorn.Server(config)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as e:  # surfaced to the caller below; a thread cannot raise into it
            errors.append(e)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"gateway-{real_port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(5)
            why = repr(errors[0]) if errors else "it did not start in time (see the log above)"
            raise GatewayStartError(f"the gateway on {host}:{real_port} failed to start: {why}")
        time.sleep(0.02)
    return GatewayHandle(server, thread, app, host, real_port)
