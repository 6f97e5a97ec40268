"""`GET /health` and `GET /metrics` on the gateway: what an operator or an orchestrator polls, without a token.

`/health` is 200 when vLLM answers (with replicas: when at least one replica is healthy) and the registry has
started, 503 otherwise, and names the serving version. It reports each part: with a collector (capture, feedback
by response id), `collector` is "ok" or why not, and `status` is "ok" only when every part is ready — while the
collector starts (a first start trains its name model, ~30 s) or is down, `status` is "degraded" with 200:
completions are served (capture spools), feedback answers 503. A client that waits for "ok" can use every
endpoint. `/metrics` is the Prometheus text of `_metrics.GatewayMetrics`.

Deliberately not here: per-replica detail (`GET /admin/replicas`, behind the admin token) and probing vLLM's
generation (a health check does not spend a request on the model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ._metrics import CONTENT_TYPE
from .errors import ServerError

if TYPE_CHECKING:
    from ._gateway import Gateway


def health_router(gw: Gateway) -> APIRouter:
    """The two routes, reading the gateway's upstream, replicas, registry and metrics at request time."""
    router = APIRouter()

    @router.get("/health")
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
        body: dict[str, Optional[str]] = {
            "status": "unavailable" if not vllm_ok else "ok" if collector_ok else "degraded",
            "vllm": "ok" if vllm_ok else detail,
            "alias": gw.settings.alias,
            "serving": registry.serving if registry.started else None,
        }
        if collector is not None:
            body["collector"] = collector
        if gw.replicas is not None:
            body["replicas"] = detail
        return JSONResponse(body, status_code=200 if vllm_ok else 503)

    @router.get("/metrics")
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
