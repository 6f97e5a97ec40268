"""The gateway's admin API for versions and replicas, and the admin token check every `/admin/*` route has.

    GET  /admin/versions   every version, the alias, the audit history
    POST /admin/versions   validate an adapter (or a full checkpoint) and register it as the next version
    POST /admin/promote    point the alias at a version (drain, then unload, the previous one)
    POST /admin/rollback   serve the previously serving version again
    GET  /admin/replicas   every vLLM upstream: url, pid, healthy, in flight, versions loaded on it

`admin_router` is how every admin router here and in `_api_canary` is made: its routes answer 401
(`AdminAuthError`, in OpenAI's error shape) unless the request carries `Authorization: Bearer <admin token>`,
compared in constant time. Alias flips are counted in the gateway's metrics here, where the answer says
whether one happened.

Deliberately not here: the canary routes (`_api_canary`), the registry's rules (`_registry`: what may be
loaded, promoted or rolled back, and the errors that say why not) and the client side (`_admin.AdminClient`).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Callable

from fastapi import APIRouter, Depends, Request

from . import _defaults as D
from ._auth import bearer_token
from ._models import LoadRequest, PromoteRequest, ReplicaInfo, SwapResult, VersionInfo, VersionsView
from ._settings import GatewaySettings
from .errors import AdminAuthError

if TYPE_CHECKING:
    from ._gateway import Gateway


def admin_router(settings: GatewaySettings) -> APIRouter:
    """A router whose every route needs the admin token of `settings` (read at request time)."""
    return APIRouter(dependencies=[Depends(_admin_check(settings))])


def _admin_check(settings: GatewaySettings) -> Callable[[Request], None]:
    def require_admin(request: Request) -> None:
        token = bearer_token(request.headers.get("authorization"))
        if token is None or not hmac.compare_digest(token.encode(), settings.admin_token.encode()):
            raise AdminAuthError(
                "admin endpoints need 'Authorization: Bearer <admin token>'; the token is "
                f"${D.ADMIN_TOKEN_ENV} or the contents of $LOOPLIFT_HOME/{D.ADMIN_TOKEN_FILE} on the gateway host."
            )

    return require_admin


def versions_router(gw: Gateway) -> APIRouter:
    """List, load, promote, roll back: the registry's admin calls, once it has started."""
    router = admin_router(gw.settings)

    @router.get("/admin/versions")
    async def list_versions() -> VersionsView:
        """Every version, the alias, and the audit history."""
        return (await gw.registry.ready()).view()

    @router.post("/admin/versions", status_code=201)
    async def load_version(req: LoadRequest) -> VersionInfo:
        """Validate an adapter directory and load it into vLLM as the next version (not promoted); a full
        checkpoint directory (config.json, no adapter_config.json) is registered as a full-weight version."""
        return await (await gw.registry.ready()).load(req.path, req.name)

    @router.post("/admin/promote")
    async def promote(req: PromoteRequest) -> SwapResult:
        """Point the alias at a version; the previous one is drained, then unloaded (a full-weight version:
        its vLLM set is started and warmed first, and the old set drained, then stopped)."""
        result = await (await gw.registry.ready()).promote(req.version)
        if result.previous != result.serving:
            gw.metrics.swapped("promote", result.swap_ms)
        return result

    @router.post("/admin/rollback")
    async def rollback() -> SwapResult:
        """Serve the previously serving version again."""
        result = await (await gw.registry.ready()).rollback()
        gw.metrics.swapped("rollback", result.swap_ms)
        return result

    return router


def replicas_router(gw: Gateway) -> APIRouter:
    """`GET /admin/replicas`."""
    router = admin_router(gw.settings)

    @router.get("/admin/replicas")
    async def list_replicas() -> list[ReplicaInfo]:
        """Every vLLM upstream: url, pid (started here), healthy, in flight, versions loaded on it."""
        if gw.replicas is not None:
            return gw.replicas_view()
        return gw.replicas_view(await gw.upstream.health())

    return router
