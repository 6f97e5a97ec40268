"""The OpenAI-compatible gateway: a FastAPI app in front of one vLLM server.

`/v1/chat/completions`, `/v1/completions` and `/v1/models` speak OpenAI's wire format. A request's
`model` (the alias or a version name) is resolved by the registry to the name vLLM serves, and the
body is forwarded otherwise unchanged, so vLLM extras (`return_token_ids`, `logprobs`, `seed`, ...)
pass through; streams are proxied byte for byte as vLLM produces them. `/admin/*` (always behind the
admin token) loads, promotes and rolls back versions; `/health` and `/metrics` are for operators.

Deliberately not here: starting vLLM (`_vllm`), version bookkeeping (`_registry`), traffic capture,
rate limiting, and any rewriting of vLLM's responses (their `model` field names the version that
answered, which is what trajectories should record).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types import Model
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import Receive, Scope, Send

from . import _defaults as D
from ._models import LoadRequest, PromoteRequest, SwapResult, VersionInfo, VersionsView
from ._registry import Lease, Registry, VLLMAdapters
from ._settings import GatewaySettings
from .errors import AdminAuthError, ServerError, UpstreamError

log = logging.getLogger("looplift.server.gateway")


class _Metrics:
    """Prometheus metrics on a per-app registry (several gateways may live in one process, e.g. tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "looplift_gateway_requests", "Requests answered, by requested model, serving version, endpoint and status.",
            ["model", "version", "endpoint", "status"], registry=r,
        )
        self.latency = Histogram(
            "looplift_gateway_request_seconds", "Time from request to last byte, by endpoint.",
            ["endpoint"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
        )
        self.in_flight = Gauge("looplift_gateway_in_flight", "Requests in flight, by version.", ["version"], registry=r)
        self.swaps = Counter("looplift_gateway_swaps", "Alias flips, by kind (promote, rollback).", ["kind"], registry=r)
        self.swap_seconds = Histogram(
            "looplift_gateway_swap_seconds", "Time from an admin swap request to the alias flip.", registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.upstream_errors = Counter(
            "looplift_gateway_upstream_errors", "Failures talking to vLLM, by endpoint.", ["endpoint"], registry=r,
        )


class _ProxyStream(StreamingResponse):
    """A proxied SSE stream whose `on_close` runs however the response ends.

    Starlette skips `background` tasks when the client disconnects, and a generator that never
    started never runs its `finally`; this wrapper is what guarantees the in-flight count drops.
    """

    def __init__(self, content: AsyncIterator[bytes], *, on_close: Callable[[], Awaitable[None]],
                 headers: dict[str, str]) -> None:
        super().__init__(content, status_code=200, media_type="text/event-stream", headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


def _error(status: int, message: str, *, type_: Optional[str] = None, param: Optional[str] = None,
           code: Optional[str] = None, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    """An OpenAI-style error body."""
    if type_ is None:
        type_ = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _bearer(request: Request) -> Optional[str]:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def create_gateway(
    settings: GatewaySettings,
    vllm_base_url: str,
    *,
    transport: Optional[httpx.AsyncBaseTransport] = None,
) -> FastAPI:
    """Build the gateway app for the vLLM at `vllm_base_url` (e.g. `http://127.0.0.1:41234`, no `/v1`).

    `transport` replaces the upstream HTTP transport (httpx's test seam); leave it None in production.
    The registry is read and reconciled with vLLM at startup, or at the first request if vLLM was
    not answering then.
    """
    metrics = _Metrics()
    state: dict[str, Any] = {}
    start_lock = asyncio.Lock()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = httpx.AsyncClient(
            base_url=vllm_base_url.rstrip("/"),
            transport=transport,
            timeout=httpx.Timeout(settings.request_timeout_s, connect=D.CONNECT_TIMEOUT_S),
            # The gateway multiplexes every client onto one upstream; don't let the pool be the bottleneck.
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
        )
        registry = Registry(
            settings, VLLMAdapters(client),
            on_in_flight=lambda v, n: metrics.in_flight.labels(version=v).set(n),
        )
        state["client"], state["registry"] = client, registry
        app.state.registry = registry  # exposed for tests and embedding code
        try:
            await ensure_started()
        except ServerError as e:
            log.warning("registry not started yet (%s); will retry on the next request", e.message)
        try:
            yield
        finally:
            await registry.close()
            await client.aclose()

    async def ensure_started() -> Registry:
        registry: Registry = state["registry"]
        if not registry.started:
            async with start_lock:
                if not registry.started:
                    await registry.start()
        return registry

    app = FastAPI(title="looplift gateway", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(ServerError)
    async def _server_error(_: Request, e: ServerError) -> JSONResponse:
        status = e.http_status
        if isinstance(e, UpstreamError):
            # vLLM refusing an adapter (4xx) is the caller's problem; vLLM failing or gone is ours.
            status = 400 if e.status is not None and 400 <= e.status < 500 else 502
        return _error(status, e.message, code=e.code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        msg = f"{param or 'body'}: {first.get('msg', 'invalid request')}"
        return _error(400, msg, param=param, code="invalid_request")

    # ---- auth -------------------------------------------------------------------------------
    def require_admin(request: Request) -> None:
        token = _bearer(request)
        if token is None or not hmac.compare_digest(token.encode(), settings.admin_token.encode()):
            raise AdminAuthError(
                "admin endpoints need 'Authorization: Bearer <admin token>'; the token is "
                f"${D.ADMIN_TOKEN_ENV} or the contents of $LOOPLIFT_HOME/{D.ADMIN_TOKEN_FILE} on the gateway host."
            )

    def check_api_key(request: Request) -> Optional[JSONResponse]:
        if not settings.api_keys:
            return None
        token = _bearer(request)
        if token is not None and any(hmac.compare_digest(token.encode(), k.encode()) for k in settings.api_keys):
            return None
        return _error(
            401, "Incorrect or missing API key: send 'Authorization: Bearer <key>' with one of the keys in "
            f"${D.API_KEYS_ENV}.", code="invalid_api_key",
        )

    # ---- proxy ------------------------------------------------------------------------------
    async def proxy(request: Request, endpoint: str, required: str) -> Response:
        t0 = time.perf_counter()
        denied = check_api_key(request)
        if denied is not None:
            return denied
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return _error(400, f"The request body is not valid JSON ({e}).", code="invalid_json")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.", code="invalid_json")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _error(400, "Missing required parameter: 'model' (a string: the alias or a version name).",
                          param="model", code="missing_required_parameter")
        if required not in body:
            return _error(400, f"Missing required parameter: '{required}'.", param=required,
                          code="missing_required_parameter")
        if required == "messages" and not isinstance(body["messages"], list):
            return _error(400, "'messages' must be an array of chat messages.", param="messages",
                          code="invalid_type")
        try:
            registry = await ensure_started()
        except ServerError as e:
            metrics.upstream_errors.labels(endpoint=endpoint).inc()
            return _error(503, f"The gateway cannot reach vLLM yet: {e.message}", code="upstream_unavailable")
        lease = registry.acquire(model)
        if lease is None:
            metrics.requests.labels(model="unknown", version="", endpoint=endpoint, status="404").inc()
            return _error(
                404, f"The model '{model}' does not exist or is not loaded. Available: "
                f"{', '.join(registry.model_ids())}.", param="model", code="model_not_found",
            )
        body["model"] = lease.version
        return await forward(body, lease, endpoint, model if model == settings.alias else lease.version, t0)

    async def forward(body: dict[str, Any], lease: Lease, endpoint: str, model_label: str, t0: float) -> Response:
        client: httpx.AsyncClient = state["client"]
        headers = {"x-looplift-version": lease.version}
        done = False

        def finish(status: str) -> None:
            nonlocal done
            if done:
                return
            done = True
            lease.release()
            metrics.requests.labels(model=model_label, version=lease.version, endpoint=endpoint, status=status).inc()
            metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - t0)

        try:
            upstream = await client.send(client.build_request("POST", endpoint, json=body), stream=True)
        except httpx.TimeoutException as e:
            metrics.upstream_errors.labels(endpoint=endpoint).inc()
            finish("504")
            return _error(504, f"vLLM did not answer in time ({e!r}).", code="upstream_timeout", headers=headers)
        except httpx.HTTPError as e:
            metrics.upstream_errors.labels(endpoint=endpoint).inc()
            finish("502")
            return _error(502, f"vLLM is not reachable ({e!r}).", code="upstream_unavailable", headers=headers)

        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if upstream.status_code != 200 or not is_sse:
            try:
                content = await upstream.aread()
            except httpx.HTTPError as e:
                metrics.upstream_errors.labels(endpoint=endpoint).inc()
                finish("502")
                return _error(502, f"vLLM broke off its answer ({e!r}).", code="upstream_error", headers=headers)
            finally:
                await upstream.aclose()
                # finish() also runs on cancellation (client gone), so the lease is never leaked.
                if not done:
                    if upstream.status_code >= 500:
                        metrics.upstream_errors.labels(endpoint=endpoint).inc()
                    finish(str(upstream.status_code))
            return Response(
                content, status_code=upstream.status_code, headers=headers,
                media_type=upstream.headers.get("content-type", "application/json"),
            )

        async def relay() -> AsyncIterator[bytes]:
            status = "200"
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            except httpx.HTTPError as e:
                status = "stream_error"
                metrics.upstream_errors.labels(endpoint=endpoint).inc()
                err = {"error": {"message": f"vLLM broke off the stream ({e!r})", "type": "server_error",
                                 "param": None, "code": "upstream_error"}}
                yield f"data: {json.dumps(err)}\n\n".encode()
            finally:
                await upstream.aclose()
                finish(status)

        async def cleanup() -> None:
            await upstream.aclose()
            finish("client_closed")

        return _ProxyStream(relay(), on_close=cleanup, headers=headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions (stream and non-stream), proxied to vLLM."""
        return await proxy(request, "/v1/chat/completions", "messages")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        """OpenAI text completions, proxied to vLLM."""
        return await proxy(request, "/v1/completions", "prompt")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        """The alias and every loaded version, in OpenAI list format."""
        denied = check_api_key(request)
        if denied is not None:
            return denied
        try:
            registry = await ensure_started()
        except ServerError as e:
            return _error(503, f"The gateway cannot reach vLLM yet: {e.message}", code="upstream_unavailable")
        data = []
        for mid in registry.model_ids():
            v = registry.versions[registry.serving if mid == registry.alias else mid]
            card = Model(id=mid, object="model", created=int(v.created_at.timestamp()), owned_by="looplift")
            # `root`: the version this id answers with (for the alias: the serving version).
            data.append({**card.model_dump(), "root": v.name})
        return JSONResponse({"object": "list", "data": data})

    # ---- operators --------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> JSONResponse:
        """200 when vLLM answers its /health, 503 otherwise; names the serving version."""
        client: httpx.AsyncClient = state["client"]
        registry: Registry = state["registry"]
        try:
            r = await client.get("/health", timeout=D.HEALTH_TIMEOUT_S)
            vllm_ok, detail = r.status_code == 200, f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            vllm_ok, detail = False, repr(e)
        if vllm_ok:
            try:
                await ensure_started()
            except ServerError as e:
                vllm_ok, detail = False, e.message
        body = {
            "status": "ok" if vllm_ok else "unavailable",
            "vllm": "ok" if vllm_ok else detail,
            "alias": settings.alias,
            "serving": registry.serving if registry.started else None,
        }
        return JSONResponse(body, status_code=200 if vllm_ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus text exposition of the gateway's metrics."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # ---- admin ------------------------------------------------------------------------------
    admin = [Depends(require_admin)]

    @app.get("/admin/versions", dependencies=admin)
    async def list_versions() -> VersionsView:
        """Every version, the alias, and the audit history."""
        return (await ensure_started()).view()

    @app.post("/admin/versions", dependencies=admin, status_code=201)
    async def load_version(req: LoadRequest) -> VersionInfo:
        """Validate an adapter directory and load it into vLLM as the next version (not promoted)."""
        return await (await ensure_started()).load(req.path, req.name)

    @app.post("/admin/promote", dependencies=admin)
    async def promote(req: PromoteRequest) -> SwapResult:
        """Point the alias at a version; the previous one is drained, then unloaded."""
        result = await (await ensure_started()).promote(req.version)
        if result.previous != result.serving:
            metrics.swaps.labels(kind="promote").inc()
            metrics.swap_seconds.observe(result.swap_ms / 1000)
        return result

    @app.post("/admin/rollback", dependencies=admin)
    async def rollback() -> SwapResult:
        """Serve the previously serving version again."""
        result = await (await ensure_started()).rollback()
        metrics.swaps.labels(kind="rollback").inc()
        metrics.swap_seconds.observe(result.swap_ms / 1000)
        return result

    return app
