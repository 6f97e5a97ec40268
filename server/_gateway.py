"""The OpenAI-compatible gateway in front of one vLLM server or several: how its parts are put together.

`create_gateway` returns one ASGI app, a `Gateway`, which owns:

* `upstream` (`_upstream.Upstream`): the one HTTP client to vLLM; with several upstreams, `replicas`
  (`_replicas.ReplicaSet`) instead, which routes, watches health, restarts local replicas, and fans the
  adapter calls out (the single-upstream gateway has no routing code on its hot path);
* `registry` (`_registry.Registry`): versions, the alias, leases, hot swap; it reaches vLLM only through
  `upstream`'s adapter calls;
* `metrics` (`_metrics.GatewayMetrics`);
* `proxy` (`_proxy.Proxy`): the hot path, `POST /v1/chat/completions` and `/v1/completions`, dispatched
  to straight from `Gateway.__call__` by path;
* `api`: a FastAPI app for everything else — `GET /v1/models`, `/v1/models/{id}`, `POST /v1/feedback`
  (`_feedback`), `/health`, `/metrics`, and `/admin/*` (always behind the admin token: list, load, promote,
  roll back, canary), and the lifespan (the registry is reconciled with vLLM at start, or at the first request
  if vLLM was not answering then);
* `keys` (`_auth.KeyRing`): the client API keys and their public ids;
* with a collector (`connect_collector`): `capture` (`_capture`, hooked into `proxy`), `collector_link`
  (feedback forwarding).

Replicas (`_replicas`, several upstreams) swap `proxy` for a `RoutedProxy`, which inherits the capture hooks.

Deliberately not here: starting vLLM (`_vllm`), rate limiting, and any rewriting of vLLM's answers (their
`model` field names the version that answered, which is what trajectories should record).
"""

from __future__ import annotations

import hmac
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional, Sequence, Union

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from openai.types import Model
from starlette.concurrency import run_in_threadpool

from . import _defaults as D
from ._auth import KeyRing, bearer_token
from ._capture import Capture
from ._collector_link import CollectorLink
from ._feedback import feedback_router
from ._metrics import CONTENT_TYPE, GatewayMetrics
from ._models import (
    CanaryDecisionRequest,
    CanaryRequest,
    CanaryView,
    LoadRequest,
    PromoteRequest,
    ReplicaInfo,
    SwapResult,
    VersionInfo,
    VersionsView,
)
from ._proxy import ENDPOINTS, Proxy, Receive, RoutedProxy, Scope, Send, api_key_denied, error_payload
from ._registry import Registry
from ._replicas import LocalReplica, ReplicaSet, Source
from ._settings import GatewaySettings
from ._upstream import Upstream
from .errors import AdminAuthError, ServerError, UpstreamError

log = logging.getLogger("looplift.server.gateway")


class Gateway:
    """The gateway as one ASGI app (see the module docstring). Build it with `create_gateway`."""

    def __init__(self, settings: GatewaySettings, upstreams: Union[Source, Sequence[Source]]) -> None:
        self.settings = settings
        self.keys = KeyRing(settings.api_keys)
        sources: list[Source] = [upstreams] if isinstance(upstreams, (str, LocalReplica)) else list(upstreams)
        if not sources:
            raise ValueError("the gateway needs at least one vLLM upstream")
        #: The replica set when there are several upstreams; None for one (no routing on the hot path).
        self.replicas: Optional[ReplicaSet] = None
        self._local = sources[0] if len(sources) == 1 and isinstance(sources[0], LocalReplica) else None
        if isinstance(upstreams, (str, LocalReplica)):
            url = sources[0] if isinstance(sources[0], str) else sources[0].url
            self.upstream = Upstream(url, read_timeout_s=settings.request_timeout_s)
            self.registry = Registry(settings, self.upstream)
            self.metrics = GatewayMetrics(in_flight=self.registry.in_flight)
            self.proxy: Proxy = Proxy(settings, self.registry, self.upstream, self.metrics, self.keys)
        else:
            self.replicas = ReplicaSet(settings, sources)
            self.upstream = self.replicas.replicas[0].upstream
            self.registry = Registry(settings, self.replicas)
            self.metrics = GatewayMetrics(in_flight=self.registry.in_flight, replicas=lambda: self.replicas_view())
            self.proxy = RoutedProxy(settings, self.registry, self.replicas, self.metrics, self.keys)
        #: Capture (`_capture`) and the link to the collector (feedback); see `connect_collector`.
        self.capture: Optional[Capture] = None
        self.collector_link: Optional[CollectorLink] = None
        self.api = _control_api(self)
        if settings.collector_url:
            self.connect_collector(settings.collector_url, settings.collector_key)

    def connect_collector(self, url: str, key: Optional[str]) -> None:
        """Use the collector at `url` (ingest key `key`) for capture and feedback by response id.
        Capture starts here when the settings ask for it (`capture` or `capture_key_ids`). Call once, before
        traffic (`looplift up` calls it when its collector has started, which is after the gateway)."""
        self.collector_link = CollectorLink(url, key)
        if self.capture is None and (self.settings.capture or self.settings.capture_key_ids):
            self.capture = Capture.start(self.settings, self.metrics.registry, url, key,
                                         self.settings.capture_spool_dir)
            self.proxy.capture = self.capture

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in ENDPOINTS:
            await self.proxy(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    def replicas_view(self, single_health: Optional[tuple[bool, str]] = None) -> list[ReplicaInfo]:
        """`GET /admin/replicas`; for one upstream, `single_health` is its `/health` answer."""
        if self.replicas is not None:
            return self.replicas.view()
        ok, detail = single_health or (True, "")
        reg = self.registry
        return [ReplicaInfo(url=self.upstream.base_url, pid=self._local.pid if self._local is not None else None,
                            healthy=ok, in_flight=sum(reg.in_flight().values()), detail=None if ok else detail,
                            versions=sorted(v.name for v in reg.versions.values() if v.state == "loaded") if reg.started else [])]


def create_gateway(settings: GatewaySettings, upstreams: Union[Source, Sequence[Source]]) -> Gateway:
    """Build the gateway (an ASGI app) for one vLLM (`http://127.0.0.1:41234`, no `/v1`) or several (a list of
    URLs and `LocalReplica`s: requests are routed among them, versions loaded on all of them). A list, even of
    one, makes a replica set; over `LocalReplica`s only, it serves full-weight versions blue/green.

    The registry is read and reconciled with vLLM at startup, or at the first request if vLLM was not
    answering then. `gateway.registry` is the live registry (for tests and embedding code).
    """
    return Gateway(settings, upstreams)


def _error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_payload(status, message, param=param, code=code), status_code=status)


def _control_api(gw: Gateway) -> FastAPI:
    settings, registry, upstream, metrics = gw.settings, gw.registry, gw.upstream, gw.metrics

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            await registry.ready()
        except ServerError as e:
            log.warning("registry not started yet (%s); will retry on the next request", e.message)
        if gw.replicas is not None:
            gw.replicas.start()
        try:
            yield
        finally:
            if gw.capture is not None:  # what is queued goes to the collector, or to the spool
                await run_in_threadpool(gw.capture.close)
            if gw.collector_link is not None:
                await gw.collector_link.close()
            await registry.close()
            if gw.replicas is not None:
                await gw.replicas.close()
            else:
                await upstream.close()

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
        return _error(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}", param=param,
                      code="invalid_request")

    def require_admin(request: Request) -> None:
        token = bearer_token(request.headers.get("authorization"))
        if token is None or not hmac.compare_digest(token.encode(), settings.admin_token.encode()):
            raise AdminAuthError(
                "admin endpoints need 'Authorization: Bearer <admin token>'; the token is "
                f"${D.ADMIN_TOKEN_ENV} or the contents of $LOOPLIFT_HOME/{D.ADMIN_TOKEN_FILE} on the gateway host."
            )

    # ---- OpenAI: models ---------------------------------------------------------------------
    def model_card(mid: str) -> dict[str, object]:
        v = registry.resolve(mid)
        card = Model(id=mid, object="model", created=int(v.created_at.timestamp()), owned_by="looplift")
        # `root`: the version this id answers with (for the alias: the serving version).
        return {**card.model_dump(), "root": v.name}

    async def models_ready(request: Request) -> Optional[JSONResponse]:
        """None when the caller may list models and the registry is up; else the error answer."""
        if gw.keys and gw.keys.match(request.headers.get("authorization")) is None:
            return JSONResponse(api_key_denied(), status_code=401)
        try:
            await registry.ready()
        except ServerError as e:
            return _error(503, f"The gateway cannot reach vLLM yet: {e.message}", code="upstream_unavailable")
        return None

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        """The alias and every loaded version, in OpenAI list format."""
        denied = await models_ready(request)
        if denied is not None:
            return denied
        return JSONResponse({"object": "list", "data": [model_card(mid) for mid in registry.model_ids()]})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> Response:
        """One model (the alias or a loaded version), as OpenAI's `models.retrieve` expects it."""
        denied = await models_ready(request)
        if denied is not None:
            return denied
        if model_id not in registry.model_ids():
            return _error(404, f"The model '{model_id}' does not exist or is not loaded. Available: "
                          f"{', '.join(registry.model_ids())}.", param="model", code="model_not_found")
        return JSONResponse(model_card(model_id))

    app.include_router(feedback_router(gw))

    # ---- operators --------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> JSONResponse:
        """200 when vLLM (with replicas: at least one replica) answers, 503 otherwise; names the serving version."""
        if gw.replicas is not None:
            n = gw.replicas.healthy_count()
            vllm_ok, detail = n > 0, f"{n} of {len(gw.replicas.replicas)} replicas healthy"
        else:
            vllm_ok, detail = await upstream.health()
        if vllm_ok:
            try:
                await registry.ready()
            except ServerError as e:
                vllm_ok, detail = False, e.message
        body = {
            "status": "ok" if vllm_ok else "unavailable",
            "vllm": "ok" if vllm_ok else detail,
            "alias": settings.alias,
            "serving": registry.serving if registry.started else None,
        }
        if gw.replicas is not None:
            body["replicas"] = detail
        return JSONResponse(body, status_code=200 if vllm_ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus text exposition of the gateway's metrics."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    # ---- admin ------------------------------------------------------------------------------
    admin = [Depends(require_admin)]

    @app.get("/admin/versions", dependencies=admin)
    async def list_versions() -> VersionsView:
        """Every version, the alias, and the audit history."""
        return (await registry.ready()).view()

    @app.get("/admin/replicas", dependencies=admin)
    async def list_replicas() -> list[ReplicaInfo]:
        """Every vLLM upstream: url, pid (started here), healthy, in flight, versions loaded on it."""
        if gw.replicas is not None:
            return gw.replicas_view()
        return gw.replicas_view(await upstream.health())

    @app.post("/admin/versions", dependencies=admin, status_code=201)
    async def load_version(req: LoadRequest) -> VersionInfo:
        """Validate an adapter directory and load it into vLLM as the next version (not promoted); a full
        checkpoint directory (config.json, no adapter_config.json) is registered as a full-weight version."""
        return await (await registry.ready()).load(req.path, req.name)

    @app.post("/admin/promote", dependencies=admin)
    async def promote(req: PromoteRequest) -> SwapResult:
        """Point the alias at a version; the previous one is drained, then unloaded (a full-weight version:
        its vLLM set is started and warmed first, and the old set drained, then stopped)."""
        result = await (await registry.ready()).promote(req.version)
        if result.previous != result.serving:
            metrics.swapped("promote", result.swap_ms)
        return result

    @app.post("/admin/rollback", dependencies=admin)
    async def rollback() -> SwapResult:
        """Serve the previously serving version again."""
        result = await (await registry.ready()).rollback()
        metrics.swapped("rollback", result.swap_ms)
        return result

    @app.get("/admin/canary", dependencies=admin)
    async def canary_status() -> CanaryView:
        """The running canary (None when none runs) and the recent canary decisions with their figures."""
        return (await registry.ready()).canary_view()

    @app.post("/admin/canary", dependencies=admin)
    async def canary_start(req: CanaryRequest) -> CanaryView:
        """Send `fraction` of the alias's traffic to a loaded version (sticky per X-Looplift-Session)."""
        return await (await registry.ready()).start_canary(req.version, req.fraction)

    @app.delete("/admin/canary", dependencies=admin)
    async def canary_stop() -> CanaryView:
        """End the running canary; its candidate is drained, then unloaded."""
        return await (await registry.ready()).stop_canary()

    @app.post("/admin/canary/decision", dependencies=admin)
    async def canary_decision(req: CanaryDecisionRequest) -> CanaryView:
        """Record an automatic decision (promote / drop the candidate, roll back a watched promotion) and act."""
        view, swap = await (await registry.ready()).decide_canary(req)
        if swap is not None and swap.previous != swap.serving:
            metrics.swapped(req.decision, swap.swap_ms)
        return view

    return app
