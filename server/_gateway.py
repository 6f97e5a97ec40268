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
* `api`: a FastAPI app for everything else, one router per concern, each built from the gateway itself:
  `GET /v1/models`, `/v1/models/{id}` (`_api_models`), `POST /v1/feedback` (`_feedback`), `/health` and
  `/metrics` (`_api_health`), and `/admin/*`, always behind the admin token (`_api_admin`: list, load,
  promote, roll back, replicas; `_api_canary`: the canary); errors answer in OpenAI's shape (`_api_errors`),
  and its OpenAPI document (`/openapi.json`) lists every status each route answers (`sdk.infra.finish_openapi`).
  Its lifespan is `Gateway.lifespan` (the registry is reconciled with vLLM at start, or at the first request
  if vLLM was not answering then);
* `keys` (`_auth.KeyRing`): the client API keys and their public ids;
* with a collector (`connect_collector`): `capture` (`_capture`, hooked into `proxy`), `collector_link`
  (feedback forwarding).

Replicas (`_replicas`, several upstreams) swap `proxy` for a `RoutedProxy`, which inherits the capture hooks.

Deliberately not here: starting vLLM (`_vllm`), rate limiting, and any rewriting of vLLM's answers (their
`model` field names the version that answered, which is what trajectories should record).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional, Sequence, Union

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from sdk.infra import finish_openapi

from ._api_admin import replicas_router, versions_router
from ._api_canary import canary_router
from ._api_errors import install_error_handlers
from ._api_health import health_router
from ._api_models import models_router
from ._auth import KeyRing
from ._capture import Capture
from ._collector_link import CollectorLink
from ._feedback import feedback_router
from ._metrics import GatewayMetrics
from ._models import ReplicaInfo
from ._proxy import ENDPOINTS, Proxy, Receive, RoutedProxy, Scope, Send
from ._registry import Registry
from ._replicas import LocalReplica, ReplicaSet, Source
from ._settings import GatewaySettings
from ._upstream import Upstream
from .errors import ServerError

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
        elif settings.await_collector and self._captures():  # capture from the first request; deliver once connected
            self.capture = Capture.start(settings, self.metrics.registry, None, None, settings.capture_spool_dir)
            self.proxy.capture = self.capture

    def _captures(self) -> bool:
        return self.settings.capture or bool(self.settings.capture_key_ids)

    def connect_collector(self, url: str, key: Optional[str]) -> None:
        """Use the collector at `url` (ingest key `key`) for capture and feedback by response id.
        Capture starts here when the settings ask for it (`capture` or `capture_key_ids`), unless it started
        with the gateway (`await_collector`: `looplift up` starts its collector after the gateway), holding
        what it captured until now. Call once."""
        self.collector_link = CollectorLink(url, key)
        if self.capture is not None:
            self.capture.connect(url, key)
        elif self._captures():
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

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        """The control API's lifespan: start the registry (or leave it to the first request if vLLM is not
        answering yet) and the replica watch; at shutdown, hand queued captures on, then close every part."""
        try:
            await self.registry.ready()
        except ServerError as e:
            log.warning("registry not started yet (%s); will retry on the next request", e.message)
        if self.replicas is not None:
            self.replicas.start()
        try:
            yield
        finally:
            if self.capture is not None:  # what is queued goes to the collector, or to the spool
                await run_in_threadpool(self.capture.close)
            if self.collector_link is not None:
                await self.collector_link.close()
            await self.registry.close()
            if self.replicas is not None:
                await self.replicas.close()
            else:
                await self.upstream.close()


def create_gateway(settings: GatewaySettings, upstreams: Union[Source, Sequence[Source]]) -> Gateway:
    """Build the gateway (an ASGI app) for one vLLM (`http://127.0.0.1:41234`, no `/v1`) or several (a list of
    URLs and `LocalReplica`s: requests are routed among them, versions loaded on all of them). A list, even of
    one, makes a replica set; over `LocalReplica`s only, it serves full-weight versions blue/green.

    The registry is read and reconciled with vLLM at startup, or at the first request if vLLM was not
    answering then. `gateway.registry` is the live registry (for tests and embedding code).
    """
    return Gateway(settings, upstreams)


def _control_api(gw: Gateway) -> FastAPI:
    """The FastAPI app for everything but the completion endpoints: one router per concern, each reading the
    gateway's parts through `gw` at request time (capture and the collector link are connected later)."""
    app = FastAPI(title="looplift gateway", lifespan=gw.lifespan, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.include_router(models_router(gw))
    app.include_router(feedback_router(gw))
    app.include_router(health_router(gw))
    # Admin routers (`_api_admin.admin_router`): every route behind the admin token.
    app.include_router(versions_router(gw))
    app.include_router(replicas_router(gw))
    app.include_router(canary_router(gw))
    finish_openapi(app)
    return app
