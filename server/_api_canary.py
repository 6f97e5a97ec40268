"""The gateway's canary admin API, behind the admin token (`_api_admin.admin_router`):

    GET    /admin/canary            the running canary (None when none runs) and the recent canary decisions
    POST   /admin/canary            send `fraction` of the alias's traffic to a loaded version (sticky per session)
    DELETE /admin/canary            end the running canary; its candidate is drained, then unloaded
    POST   /admin/canary/decision   record an automatic decision and act on it (the trainer's canary watch)

Every route's OpenAPI entry lists the statuses it answers besides its success. A decision that flips the alias
is counted in the gateway's swap metrics under the decision's name.

Deliberately not here: the canary's rules and state (`_canary_state`, inside the registry) and judging a
candidate (the trainer's canary watch, which calls these routes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

from sdk.infra import error_responses

from ._api_admin import admin_router
from ._api_errors import UPSTREAM_ERRORS
from ._models import CanaryDecisionRequest, CanaryRequest, CanaryView

if TYPE_CHECKING:
    from ._gateway import Gateway


def canary_router(gw: Gateway) -> APIRouter:
    """The four routes, on the gateway's registry once it has started."""
    router = admin_router(gw.settings)

    @router.get("/admin/canary", responses=error_responses(UPSTREAM_ERRORS))
    async def canary_status() -> CanaryView:
        """The running canary (None when none runs) and the recent canary decisions with their figures."""
        return (await gw.registry.ready()).canary_view()

    @router.post("/admin/canary", responses=error_responses({
        **UPSTREAM_ERRORS,
        400: "the body does not validate, the version serves the alias already or is not loaded (canary_conflict), "
             "or vLLM refused an operation",
        404: "no such version (version_not_found)",
        409: "another version's canary is running, or the version is a full-weight one (canary_conflict)"}))
    async def canary_start(req: CanaryRequest) -> CanaryView:
        """Send `fraction` of the alias's traffic to a loaded version (sticky per X-Looplift-Session)."""
        return await (await gw.registry.ready()).start_canary(req.version, req.fraction)

    @router.delete("/admin/canary", responses=error_responses({
        **UPSTREAM_ERRORS, 404: "no canary is running (canary_conflict)"}))
    async def canary_stop() -> CanaryView:
        """End the running canary; its candidate is drained, then unloaded."""
        return await (await gw.registry.ready()).stop_canary()

    @router.post("/admin/canary/decision", responses=error_responses({
        **UPSTREAM_ERRORS,
        400: "the body does not validate, or vLLM refused an operation",
        409: "the decision is stale: its version is no longer the canary, or no longer the serving version that "
             "can be rolled back (canary_conflict, nothing_to_roll_back); or the version does not fit the base "
             "model vLLM serves (base_conflict)"}))
    async def canary_decision(req: CanaryDecisionRequest) -> CanaryView:
        """Record an automatic decision (promote / drop the candidate, roll back a watched promotion) and act."""
        view, swap = await (await gw.registry.ready()).decide_canary(req)
        if swap is not None and swap.previous != swap.serving:
            gw.metrics.swapped(req.decision, swap.swap_ms)
        return view

    return router
