"""The hot path: `POST /v1/chat/completions` and `/v1/completions`, as a plain ASGI handler.

Every request to the model crosses this code, so it is written against ASGI directly (no FastAPI routing,
dependency solving or middleware stack; the profile in bench/gateway.py showed those, httpx and per-request
metric label lookups as most of the gateway's cost). One request is:

1. read the body; check the API key (when keys are configured) and the body (`_body.parse_body`);
2. `registry.acquire(model)`: resolve the alias to a version (the canary candidate for its share of alias
   requests while a canary runs) and hold a lease on it;
3. forward the client's bytes, with only `model` rewritten, to vLLM (`_upstream.Upstream`);
4. relay the answer: a JSON answer whole, an SSE stream chunk by chunk as vLLM produces it (byte for byte);
   both carry `x-looplift-version` (and `x-looplift-generation-config`), and the `model` field vLLM writes
   names the version that answered;
5. release the lease and count the request, however it ended: answered, vLLM failed, client gone.

Errors are OpenAI-shaped (`{"error": {"message", "type", "param", "code"}}`). A client that disconnects
during a stream ends the upstream request too, so vLLM stops generating for nobody.

Capture (`_capture`, when on for the request's key) hooks in at four points: `begin` before forwarding
(the already parsed request fields, the `X-Looplift-*` headers), the relay appending the answer's bytes
(`tee`), `seal` just before the answer's last bytes go out (the exchange is journaled before the client has
it all), and `finish` at the exchange's end (`_done`), which queues only what was not sealed.
Deliberately not here: admin, health, models and metrics routes (`_gateway`), version bookkeeping
(`_registry`), rate limiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, Awaitable, Callable, MutableMapping, Optional

import aiohttp

from sdk import wire

from . import _defaults as D
from ._auth import KeyRing
from ._body import BadRequest, RequestBody, parse_body
from ._capture import Capture, headers_of
from ._capture_build import Exchange
from ._metrics import GatewayMetrics
from ._registry import Lease, Registry
from ._replicas import Replica, ReplicaSet
from ._settings import GatewaySettings
from ._upstream import Upstream, UpstreamHTTPError
from .errors import ServerError

log = logging.getLogger("looplift.server.gateway")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: The proxied endpoints and the field each one requires.
CHAT = "/v1/chat/completions"
ENDPOINTS = {CHAT: "messages", "/v1/completions": "prompt"}
# Header names of the wire contract (`sdk.wire`), as ASGI scopes and answers spell them.
_VERSION_HEADER = wire.asgi_header(wire.VERSION_HEADER)
_REPLICA_HEADER = wire.asgi_header(wire.REPLICA_HEADER)
_GENERATION_CONFIG_HEADER = wire.asgi_header(wire.GENERATION_CONFIG_HEADER)
_SESSION_HEADER = wire.asgi_header(wire.SESSION_HEADER)
#: The OpenAI-shaped error body every looplift HTTP API answers with; `_gateway` imports it by this name.
error_payload = wire.error_body


def api_key_denied() -> dict[str, Any]:
    """The 401 body for a `/v1` request without one of the configured API keys."""
    return error_payload(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>' with one of the "
                         f"keys in ${D.API_KEYS_ENV}.", code="invalid_api_key")


async def send_json(send: Send, status: int, payload: Any, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """Answer with a JSON body (one ASGI start + one body message)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    await _answer(send, status, body, b"application/json", headers)


async def _answer(send: Send, status: int, body: bytes, content_type: bytes,
                  headers: tuple[tuple[bytes, bytes], ...]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


class Proxy:
    """The ASGI handler for `ENDPOINTS` (the gateway dispatches those paths here)."""

    def __init__(self, settings: GatewaySettings, registry: Registry, upstream: Upstream,
                 metrics: GatewayMetrics, keys: Optional[KeyRing] = None) -> None:
        self.settings = settings
        self.registry = registry
        self.upstream = upstream
        self.metrics = metrics
        self.keys = keys if keys is not None else KeyRing(settings.api_keys)
        #: Set when capture is on (`Gateway.connect_collector`); the hook is `_capture.Capture.begin/finish`.
        self.capture: Optional[Capture] = None
        gen = settings.generation_config
        #: Sent with every answer: which defaults vLLM sampled what a request left out with (`sdk.wire`).
        self.served_with: tuple[tuple[bytes, bytes], ...] = (
            ((_GENERATION_CONFIG_HEADER, gen.encode()),) if gen.isascii() and gen.isprintable() else ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint: str = scope["path"]
        t0 = time.perf_counter()
        try:
            await self._handle(endpoint, t0, scope, receive, send)
        except Exception:  # a bug: log it, and answer 500 unless the answer has started (then uvicorn closes it)
            log.exception("gateway error on %s", endpoint)
            with contextlib.suppress(Exception):
                await send_json(send, 500, error_payload(500, "Internal gateway error; see the gateway log."))

    async def _handle(self, endpoint: str, t0: float, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            return await send_json(send, 405, error_payload(405, f"Use POST for {endpoint}."), ((b"allow", b"POST"),))
        key_id = None
        if self.keys:
            key_id = self.keys.match(_header(scope, b"authorization"))
            if key_id is None:
                return await send_json(send, 401, api_key_denied())
        raw = await _read_body(receive)
        if raw is None:
            return  # the client left before sending its whole body
        try:
            body = parse_body(raw, ENDPOINTS[endpoint])
        except BadRequest as e:
            return await send_json(send, 400, error_payload(400, e.message, param=e.param, code=e.code))
        try:
            registry = await self.registry.ready()
        except ServerError as e:
            self.metrics.upstream_error(endpoint)
            return await send_json(send, 503, error_payload(
                503, f"The gateway cannot reach vLLM yet: {e.message}", code="upstream_unavailable"))
        capture = self.capture
        if capture is not None and (endpoint != CHAT or not capture.wants(key_id)):
            capture = None
        # While a canary runs, the session header keeps an episode on one version (`_canary`).
        lease = registry.acquire(body.model, _header(scope, _SESSION_HEADER) if registry.canary else None)
        if lease is None:
            self.metrics.request_done("unknown", "", endpoint, "404")
            return await send_json(send, 404, error_payload(
                404, f"The model '{body.model}' does not exist or is not loaded. Available: "
                f"{', '.join(registry.model_ids())}.", param="model", code="model_not_found"))
        tee = None if capture is None else capture.begin(body.fields, body.model, lease.version, key_id,
                                                          headers_of(scope))
        await self._exchange(endpoint, body, lease, t0, scope, receive, send, tee)

    async def _exchange(self, endpoint: str, body: RequestBody, lease: Lease, t0: float, scope: Scope,
                        receive: Receive, send: Send, tee: Optional[Exchange] = None) -> None:
        """Forward to vLLM and relay the answer; the lease is released and the request counted on every exit."""
        version = lease.version
        headers = ((_VERSION_HEADER, version.encode()), *self.served_with)
        status: Optional[str] = "client_closed"  # what a cancellation (client gone, shutdown) leaves behind
        try:
            status = await self._forward(self.upstream, endpoint, body.with_model(version), headers, receive, send,
                                         tee=tee)
        finally:
            self._done(endpoint, body, lease, t0, status, tee)

    def _done(self, endpoint: str, body: RequestBody, lease: Lease, t0: float, status: Optional[str],
              tee: Optional[Exchange]) -> None:
        """The exchange is over: release the lease, count it, hand a captured exchange to the capture queue."""
        lease.release()
        version = lease.version
        model_label = body.model if body.model == self.registry.alias else version
        seconds = time.perf_counter() - t0
        self.metrics.request_done(model_label, version, endpoint, str(status), seconds)
        if tee is not None and self.capture is not None:
            self.capture.finish(tee, str(status), seconds)

    async def _forward(self, upstream: Upstream, endpoint: str, payload: bytes,
                       headers: tuple[tuple[bytes, bytes], ...], receive: Receive, send: Send,
                       may_retry: bool = False, tee: Optional[Exchange] = None) -> Optional[str]:
        """Send `payload` to vLLM and relay its answer; returns the status label for the metrics. With
        `may_retry`, a transport failure before any byte went to the client returns None and sends nothing
        (the caller tries another replica); timeouts are never retried (the request may still be running)."""
        try:
            r = await upstream.post(endpoint, payload)
        except TimeoutError as e:
            self.metrics.upstream_error(endpoint)
            await send_json(send, 504, error_payload(504, f"vLLM did not answer in time ({upstream.describe(e)}).",
                                                     code="upstream_timeout"), headers)
            return "504"
        except UpstreamHTTPError as e:
            self.metrics.upstream_error(endpoint)
            if may_retry:
                return None
            await send_json(send, 502, error_payload(502, f"vLLM is not reachable ({upstream.describe(e)}).",
                                                     code="upstream_unavailable"), headers)
            return "502"
        async with r:  # on exit the connection goes back to the pool, or is closed if the answer was cut short
            content_type = r.headers.get("Content-Type", "application/json")
            if r.status == 200 and content_type.startswith("text/event-stream"):
                return await self._relay_stream(upstream, endpoint, r, content_type.encode(), headers, receive, send,
                                                 tee)
            try:
                content = await r.read()
            except UpstreamHTTPError as e:
                self.metrics.upstream_error(endpoint)
                if may_retry and not isinstance(e, TimeoutError):
                    return None
                await send_json(send, 502, error_payload(502, f"vLLM broke off its answer ({upstream.describe(e)}).",
                                                         code="upstream_error"), headers)
                return "502"
            if r.status >= 500:
                self.metrics.upstream_error(endpoint)
            if tee is not None and self.capture is not None:
                tee.body = content
                if r.status == 200:
                    await self.capture.seal(tee)
            await _answer(send, r.status, content, content_type.encode(), headers)
            return str(r.status)

    async def _relay_stream(self, upstream: Upstream, endpoint: str, r: aiohttp.ClientResponse, content_type: bytes,
                            headers: tuple[tuple[bytes, bytes], ...], receive: Receive, send: Send,
                            tee: Optional[Exchange] = None) -> str:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", content_type), *headers]})
        # A client that goes away must stop the generation: the watcher closes the upstream answer, which ends
        # the read below with an error, and closing the connection makes vLLM abort the request.
        gone = False

        def on_disconnect(fut: asyncio.Future[None]) -> None:
            nonlocal gone
            if not fut.cancelled():
                gone = True
                r.close()

        watch = asyncio.ensure_future(_until_disconnect(receive))
        watch.add_done_callback(on_disconnect)
        status = "200"
        try:
            async for chunk in r.content.iter_any():
                if tee is not None and self.capture is not None:
                    tee.chunks.append(chunk)
                    if self.capture.completes(tee):  # the client has it all once this chunk is out
                        await self.capture.seal(tee)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamHTTPError as e:
            if not gone:
                status = "stream_error"
                self.metrics.upstream_error(endpoint)
                err = error_payload(502, f"vLLM at {upstream.base_url} broke off the stream ({upstream.describe(e)})",
                                    code="upstream_error")
                await send({"type": "http.response.body", "body": f"data: {json.dumps(err)}\n\n".encode(),
                            "more_body": True})
        finally:
            watch.cancel()  # before the last message, which would wake it as a "disconnect"
        if gone:
            return "client_closed"
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return status


class RoutedProxy(Proxy):
    """The proxy over several replicas (`_replicas.ReplicaSet`): each attempt goes to `replicas.pick`; a
    transport failure takes that replica out, and, when no byte went back yet (a non-streaming answer is
    read whole first; a stream that had not started), the request is sent to the next healthy replica.
    Answers carry `x-looplift-replica` (which replica answered)."""

    def __init__(self, settings: GatewaySettings, registry: Registry, replicas: ReplicaSet,
                 metrics: GatewayMetrics, keys: Optional[KeyRing] = None) -> None:
        super().__init__(settings, registry, replicas.replicas[0].upstream, metrics, keys)
        self.replicas = replicas

    async def _exchange(self, endpoint: str, body: RequestBody, lease: Lease, t0: float, scope: Scope,
                        receive: Receive, send: Send, tee: Optional[Exchange] = None) -> None:
        version = lease.version
        payload = body.with_model(version)
        session = _header(scope, _SESSION_HEADER)
        tried: list[Replica] = []
        status: Optional[str] = "client_closed"
        try:
            while True:
                r = self.replicas.pick(session, tried)
                if r is None:
                    status = "503"
                    await send_json(send, 503, error_payload(
                        503, f"No healthy vLLM replica ({len(self.replicas.replicas)} configured, {len(tried)} tried; "
                        "see GET /admin/replicas).", code="upstream_unavailable"), ((_VERSION_HEADER, version.encode()),))
                    break
                tried.append(r)
                headers = ((_VERSION_HEADER, version.encode()), (_REPLICA_HEADER, r.url.encode()), *self.served_with)
                r.in_flight += 1
                try:
                    status = await self._forward(r.upstream, endpoint, payload, headers, receive, send,
                                                 may_retry=self.replicas.others_up(tried), tee=tee)
                finally:
                    r.in_flight -= 1
                if status in (None, "502", "stream_error"):
                    self.replicas.mark_down(r, f"a request to it failed ({status or 'retried elsewhere'})")
                if status is not None:
                    break
                self.metrics.retried(endpoint)
        finally:
            self._done(endpoint, body, lease, t0, status, tee)


async def _until_disconnect(receive: Receive) -> None:
    # The body has been read in full, so receive() only returns when the client disconnects.
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_body(receive: Receive) -> Optional[bytes]:
    msg = await receive()
    if msg["type"] != "http.request":
        return None
    body: bytes = msg.get("body", b"")
    if not msg.get("more_body"):
        return body
    parts = [body]
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return None
        parts.append(msg.get("body", b""))
        if not msg.get("more_body"):
            return b"".join(parts)


def _header(scope: Scope, name: bytes) -> Optional[str]:
    for k, v in scope["headers"]:
        if k == name:
            return str(v.decode("latin-1"))
    return None
