"""The gateway's canary admin API, behind the admin token (`_api_admin.admin_router`):

    GET    /admin/canary            the running canary (None when none runs) and the recent canary decisions
    POST   /admin/canary            send `fraction` of the alias's traffic to a loaded version (sticky per session)
    DELETE /admin/canary            end the running canary; its candidate is drained, then unloaded
    POST   /admin/canary/decision   record an automatic decision and act on it (the trainer's canary watch)

A decision that flips the alias is counted in the gateway's swap metrics under the decision's name.

Deliberately not here: the canary's rules and state (`_canary_state`, inside the registry) and judging a
candidate (the trainer's canary watch, which calls these routes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

from ._api_admin import admin_router
from ._models import CanaryDecisionRequest, CanaryRequest, CanaryView

if TYPE_CHECKING:
    from ._gateway import Gateway


def canary_router(gw: Gateway) -> APIRouter:
    """The four routes, on the gateway's registry once it has started."""
    router = admin_router(gw.settings)

    @router.get("/admin/canary")
    async def canary_status() -> CanaryView:
        """The running canary (None when none runs) and the recent canary decisions with their figures."""
        return (await gw.registry.ready()).canary_view()

    @router.post("/admin/canary")
    async def canary_start(req: CanaryRequest) -> CanaryView:
        """Send `fraction` of the alias's traffic to a loaded version (sticky per X-Looplift-Session)."""
        return await (await gw.registry.ready()).start_canary(req.version, req.fraction)

    @router.delete("/admin/canary")
    async def canary_stop() -> CanaryView:
        """End the running canary; its candidate is drained, then unloaded."""
        return await (await gw.registry.ready()).stop_canary()

    @router.post("/admin/canary/decision")
    async def canary_decision(req: CanaryDecisionRequest) -> CanaryView:
        """Record an automatic decision (promote / drop the candidate, roll back a watched promotion) and act."""
        view, swap = await (await gw.registry.ready()).decide_canary(req)
        if swap is not None and swap.previous != swap.serving:
            gw.metrics.swapped(req.decision, swap.swap_ms)
        return view

    return router
