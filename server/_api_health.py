"""`GET /health` and `GET /metrics` on the gateway: what an operator or an orchestrator polls, without a token.

`/health` is 200 when vLLM answers (with replicas: when at least one replica is healthy) and the registry has
started, 503 otherwise, and names the serving version. It reports each part: with a collector (capture, feedback
by response id), `collector` is "ok" or why not, and `status` is "ok" only when every part is ready — while the
collector starts (a first start trains its name model, ~30 s) or is down, `status` is "degraded" with 200:
completions are served (capture spools), feedback answers 503; the same before a collector that is on its way
is connected (`GatewaySettings.await_collector`, `looplift up`). A client that waits for "ok" can use every
endpoint. `/metrics` is the Prometheus text of `_metrics.GatewayMetrics`.

Deliberately not here: per-replica detail (`GET /admin/replicas`, behind the admin token) and probing vLLM's
generation (a health check does not spend a request on the model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

from ._metrics import CONTENT_TYPE
from .errors import ServerError

if TYPE_CHECKING:
    from ._gateway import Gateway


class HealthView(BaseModel):
    """`GET /health`'s answer, 200 or 503 alike (fields a gateway does not have are left out)."""

    status: Literal["ok", "degraded", "unavailable"]
    vllm: str = Field(description='"ok", or why vLLM (or the registry) is not ready')
    alias: str
    serving: Optional[str] = Field(description="the version the alias serves; null until the registry has started")
    collector: Optional[str] = Field(default=None, description='with a collector: "ok", or why not')
    replicas: Optional[str] = Field(default=None, description="with replicas: how many are healthy")


def health_router(gw: Gateway) -> APIRouter:
    """The two routes, reading the gateway's upstream, replicas, registry and metrics at request time."""
    router = APIRouter()

    @router.get("/health", responses={
        200: {"model": HealthView, "description": "vLLM answers; `status` says whether every part is ready"},
        503: {"model": HealthView, "description": "vLLM (or every replica) does not answer, or the registry has not "
                                                  "started"}})
    async def health() -> JSONResponse:
        """200 when vLLM (with replicas: at least one replica) answers, 503 otherwise; names the serving version;
        "ok" only when the collector (if any) is ready too, else "degraded" (see the module docstring)."""
        vllm_ok, detail = await _vllm_health(gw)
        if vllm_ok:
            try:
                await gw.registry.ready()
            except ServerError as e:
                vllm_ok, detail = False, e.message
        registry = gw.registry
        collector_ok, collector = True, None
        if gw.collector_link is not None:
            collector_ok, collector = await gw.collector_link.health()
        elif gw.settings.await_collector:
            collector_ok, collector = False, "not connected yet (starting)"
        parts: dict[str, str] = {} if collector is None else {"collector": collector}
        if gw.replicas is not None:
            parts["replicas"] = detail
        view = HealthView(status="unavailable" if not vllm_ok else "ok" if collector_ok else "degraded",
                          vllm="ok" if vllm_ok else detail, alias=gw.settings.alias,
                          serving=registry.serving if registry.started else None, **parts)
        return JSONResponse(view.model_dump(exclude_unset=True), status_code=200 if vllm_ok else 503)

    @router.get("/metrics", response_class=PlainTextResponse)
    async def prometheus() -> Response:
        """Prometheus text exposition of the gateway's metrics."""
        return Response(gw.metrics.exposition(), media_type=CONTENT_TYPE)

    return router


async def _vllm_health(gw: Gateway) -> tuple[bool, str]:
    """Whether vLLM answers, and what to say when it does not (with replicas: how many are healthy)."""
    if gw.replicas is not None:
        n = gw.replicas.healthy_count()
        return n > 0, f"{n} of {len(gw.replicas.replicas)} replicas healthy"
    return await gw.upstream.health()
