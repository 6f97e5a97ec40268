"""Capture: each `/v1/chat/completions` exchange becomes collector data, off the request path.

Opt-in (`GatewaySettings.capture`, `looplift up --capture`) or per API key (`capture_key_ids`). On the
request path the proxy only does what it must do anyway plus a few appends: `begin` reads the
`X-Looplift-*` headers and keeps a reference to the request fields `_body` already parsed; the relay
appends the answer's bytes (the JSON body, or each SSE chunk) to the `Exchange`; `seal`, just before the
answer's last bytes go out (the JSON body, the chunk with `data: [DONE]`), puts the exchange on a bounded
queue and waits until the worker has journaled its trajectory (the collector client's write-ahead file), at
most `SEAL_TIMEOUT_S`: a client that got a complete 200 has its exchange on disk, so even a SIGKILL of the
gateway right after loses no capture. This costs the answer the worker's turnaround (parse, build, one
`write()`: well under a millisecond when the worker keeps up). A full queue drops the exchange and counts it
(`looplift_gateway_capture_dropped{reason="queue_full"}`); a worker slower than the bound counts
`looplift_gateway_capture_late` and the answer goes out anyway: capture never fails a request. `finish`
queues, without waiting, what ended without a seal (a stream the client closed right after `[DONE]`).

A gateway started before its collector (`looplift up` starts the collector after it) captures from its first
request: the collector client holds (and journals) what it gets until `connect` names the collector.

A worker thread parses the answer, stitches sessions and builds the trajectory (`_capture_build`), and
hands it to the SDK's own `CollectorClient`, which batches it to the collector and spools it to disk
while the collector is down (`looplift_gateway_capture_spooled`, replayed when it answers again). The
collector anonymizes it before storing, like all other data. A capture that fails to build is logged and
counted as dropped (`reason="error"`); it never reaches the request either.

Metrics (the dashboard shows every `capture`/`drop` family): `looplift_gateway_capture_exchanges` (sent
to the collector client), `looplift_gateway_capture_dropped{reason}`, and at scrape time
`looplift_gateway_capture_queue` and `looplift_gateway_capture_spooled` / `_replayed` / `_rejected`.

A request sent with `X-Looplift-Capture: off` is not captured: the SDK sends it when it records the
episode itself (a collector was given: its trajectory, with the verifier's outcome, is the record), and the
trainer's eval gate always does (eval traffic must never become training data).

Deliberately not here: `/v1/completions` (no conversation to stitch), anonymization (the collector's job),
and anything a client did not send through the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sdk import CollectorClient, wire

from ._capture_build import Exchange, SessionBook, parse_json_answer, parse_sse_answer
from ._defaults import SEAL_TIMEOUT_S
from ._settings import GatewaySettings

log = logging.getLogger("looplift.server.capture")

_STOP = object()
#: The request headers capture reads (`sdk.wire`), as the ASGI scope spells them -> field name.
_HEADERS = {wire.asgi_header(wire.SESSION_HEADER): "session", wire.asgi_header(wire.APP_HEADER): "app",
            wire.asgi_header(wire.TASK_HEADER): "task", wire.asgi_header(wire.CAPTURE_HEADER): "capture"}


class _Scrape(Collector):
    def __init__(self, capture: "Capture") -> None:
        self._c = capture

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("looplift_gateway_capture_queue", "Captured exchanges waiting for the capture worker.",
                                value=self._c.queued)
        stats = self._c.client.stats
        for name, value, what in (("spooled", stats.spooled, "spooled to disk while the collector was unreachable"),
                                  ("replayed", stats.replayed, "replayed from the spool"),
                                  ("rejected", stats.rejected, "refused by the collector as malformed")):
            yield GaugeMetricFamily(f"looplift_gateway_capture_{name}", f"Captured trajectories {what}.", value=value)


def headers_of(scope: Any) -> dict[str, str]:
    """The `X-Looplift-Session/App/Task/Capture` values of a request (by field name), from its ASGI scope."""
    out = {}
    for k, v in scope["headers"]:
        name = _HEADERS.get(k)
        if name is not None:
            value = v.decode("latin-1").strip()
            if value:
                out[name] = value
    return out


def _stream_complete(chunks: list[bytes]) -> bool:
    """Whether the relayed SSE bytes end with the `data: [DONE]` event (it may straddle chunks)."""
    tail = b""
    for chunk in reversed(chunks):
        tail = chunk + tail
        if len(tail) >= 64:
            break
    return b"data: [DONE]" in tail[-64:]


class Capture:
    """The capture queue, its worker thread and its collector client (see the module docstring)."""

    def __init__(self, settings: GatewaySettings, registry: CollectorRegistry, client: CollectorClient) -> None:
        self.settings = settings
        self.client = client
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=settings.capture_queue)
        self._book = SessionBook()
        self._sent = Counter("looplift_gateway_capture_exchanges", "Captured exchanges handed to the collector client.",
                             registry=registry)
        self._dropped = Counter("looplift_gateway_capture_dropped", "Captured exchanges dropped, by reason "
                                "(queue_full: the worker fell behind; error: the exchange could not be turned into "
                                "a trajectory).", ["reason"], registry=registry)
        self._dropped_full = self._dropped.labels("queue_full")
        self._dropped_error = self._dropped.labels("error")
        self._late = Counter("looplift_gateway_capture_late", "Answers sent before their capture was journaled (the "
                             f"capture worker took longer than {SEAL_TIMEOUT_S} s); a SIGKILL then could lose them.",
                             registry=registry)
        self._scrape = _Scrape(self)
        registry.register(self._scrape)
        self._registry = registry
        self._thread = threading.Thread(target=self._run, name="looplift-capture", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, settings: GatewaySettings, registry: CollectorRegistry, collector_url: Optional[str],
              collector_key: Optional[str], spool_dir: Path) -> "Capture":
        """A capture delivering to the collector at `collector_url` (spooling under `spool_dir`); with None it
        holds what it captures until `connect`."""
        client = CollectorClient(collector_url, api_key=collector_key, spool_dir=spool_dir,
                                 hold=collector_url is None)
        return cls(settings, registry, client)

    def connect(self, collector_url: str, collector_key: Optional[str]) -> None:
        """Deliver to the collector at `collector_url` from now on (what was held goes first)."""
        self.client.connect(collector_url, collector_key)

    # ---- the request path (event loop): no parsing; only `seal` waits, for the worker ---------------
    def wants(self, key_id: Optional[str]) -> bool:
        """Whether a request sent with API key `key_id` (None: no key) is captured."""
        return self.settings.capture or (key_id is not None and key_id in self.settings.capture_key_ids)

    def begin(self, fields: dict[str, Any], model: str, version: str, key_id: Optional[str],
              headers: dict[str, str]) -> Optional[Exchange]:
        """Start capturing one exchange (the proxy fills `body` / `chunks` as it relays the answer); None when
        the request asks not to be captured (`X-Looplift-Capture: off`)."""
        if headers.get("capture", "").lower() == wire.CAPTURE_OFF:
            return None
        return Exchange(fields=fields, model=model, version=version, key_id=key_id, app=headers.get("app"),
                        session=headers.get("session"), task=headers.get("task"), started_at=time.time(),
                        stream=bool(fields.get("stream")))

    def completes(self, ex: Exchange) -> bool:
        """Whether the chunks relayed so far end the stream (`data: [DONE]`): seal before sending the last."""
        return _stream_complete(ex.chunks)

    async def seal(self, ex: Exchange) -> None:
        """The answer is complete and about to go out: queue the exchange and wait (at most `SEAL_TIMEOUT_S`)
        until its trajectory is journaled. Never raises."""
        if ex.sealed:
            return
        ex.sealed = True
        ex.latency_s = time.time() - ex.started_at
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        ex.on_journaled = lambda: loop.call_soon_threadsafe(_resolve, done)
        try:
            self._queue.put_nowait(ex)
        except queue.Full:
            self._dropped_full.inc()
            return
        try:
            await asyncio.wait_for(asyncio.shield(done), SEAL_TIMEOUT_S)
        except TimeoutError:
            self._late.inc()

    def finish(self, ex: Exchange, status: str, seconds: float) -> None:
        """The exchange ended with `status` after `seconds`: queue it if it succeeded and was not sealed; drop it if
        the queue is full. A stream the client closed after its `data: [DONE]` (what the official client does as
        soon as it reads it, often before vLLM's connection ends) is a complete exchange too."""
        if ex.sealed or (status != "200" and not (status == "client_closed" and _stream_complete(ex.chunks))):
            return
        ex.latency_s = seconds
        try:
            self._queue.put_nowait(ex)
        except queue.Full:
            self._dropped_full.inc()

    # ---- the worker thread ---------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        """Exchanges waiting for the worker."""
        return self._queue.qsize()

    def _run(self) -> None:
        while True:
            ex = self._queue.get()
            try:
                if ex is _STOP:
                    return
                self._capture(ex)
            except Exception:
                log.exception("capture: could not turn an exchange into a trajectory; dropped")
                self._dropped_error.inc()
            finally:
                if ex is not _STOP and ex.on_journaled is not None:
                    with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile
                        ex.on_journaled()
                self._queue.task_done()

    def _capture(self, ex: Exchange) -> None:
        reply = parse_sse_answer(ex.chunks) if ex.chunks else parse_json_answer(ex.body)
        traj = self._book.trajectory(ex, reply, self.settings.capture_app, self.settings.generation_config)
        self.client.submit(traj)
        self._sent.inc()

    # ---- delivery ------------------------------------------------------------------------------------
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every exchange queued so far was handed to the collector client and the client sent (or
        spooled) it; True if that happened within `timeout` seconds. Blocking: call it from a thread."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return self.client.flush(max(0.1, deadline - time.monotonic()))

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (or spool it), then stop the worker and the client."""
        self._queue.put(_STOP)
        self._thread.join(timeout)
        self.client.close(timeout)
        self._registry.unregister(self._scrape)
        self._registry.unregister(self._sent)
        self._registry.unregister(self._dropped)
        self._registry.unregister(self._late)


def _resolve(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)
