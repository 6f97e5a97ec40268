"""The gateway's admin API for versions and replicas, and the admin token check every `/admin/*` route has.

    GET    /admin/versions          every version, the alias, the audit history
    POST   /admin/versions          validate an adapter (or a full checkpoint) and register it as the next version
    DELETE /admin/versions/{name}   drain a version not in use, then unload its adapter (it stays listed, unloaded)
    POST   /admin/promote           point the alias at a version (drain, then unload, the previous one)
    POST   /admin/rollback          serve the previously serving version again
    GET    /admin/replicas          every vLLM upstream: url, pid, healthy, in flight, versions loaded on it

`admin_router` is how every admin router here and in `_api_canary` is made: its routes answer 401
(`AdminAuthError`, in OpenAI's error shape) unless the request carries `Authorization: Bearer <admin token>`,
compared in constant time. Every route's OpenAPI entry lists the statuses it answers besides its success.
Alias flips are counted in the gateway's metrics here, where the answer says whether one happened.

Deliberately not here: the canary routes (`_api_canary`), the registry's rules (`_registry`: what may be
loaded, promoted or rolled back, and the errors that say why not) and the client side (`_admin.AdminClient`).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Callable

from fastapi import APIRouter, Depends, Request

from sdk.infra import error_responses

from . import _defaults as D
from ._api_errors import UPSTREAM_ERRORS
from ._auth import bearer_token
from ._models import LoadRequest, PromoteRequest, ReplicaInfo, SwapResult, VersionInfo, VersionsView
from ._settings import GatewaySettings
from .errors import AdminAuthError

if TYPE_CHECKING:
    from ._gateway import Gateway


def admin_router(settings: GatewaySettings) -> APIRouter:
    """A router whose every route needs the admin token of `settings` (read at request time)."""
    return APIRouter(dependencies=[Depends(_admin_check(settings))],
                     responses=error_responses({401: "no admin token, or not the gateway's (invalid_admin_token)"}))


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
    """List, load, unload, promote, roll back: the registry's admin calls, once it has started."""
    router = admin_router(gw.settings)

    @router.get("/admin/versions", responses=error_responses(UPSTREAM_ERRORS))
    async def list_versions() -> VersionsView:
        """Every version, the alias, and the audit history."""
        return (await gw.registry.ready()).view()

    @router.post("/admin/versions", status_code=201, responses=error_responses({
        **UPSTREAM_ERRORS,
        400: "the body does not validate, the directory is not a valid adapter or checkpoint (invalid_adapter), the "
             "name is not allowed (invalid_version_name), or vLLM refused the adapter",
        409: "the name is taken (version_exists), or the version does not fit the base model vLLM serves "
             "(base_conflict)"}))
    async def load_version(req: LoadRequest) -> VersionInfo:
        """Validate an adapter directory and load it into vLLM as the next version (not promoted); a full
        checkpoint directory (config.json, no adapter_config.json) is registered as a full-weight version."""
        return await (await gw.registry.ready()).load(req.path, req.name)

    @router.delete("/admin/versions/{name}", responses=error_responses({
        **UPSTREAM_ERRORS,
        404: "no such version (version_not_found)",
        409: "the version is in use: it serves the alias (version_in_use), it is the running canary's candidate "
             "(canary_conflict), or it is a base model, which has no adapter to unload (base_conflict)"}))
    async def unload_version(name: str) -> VersionInfo:
        """Wait until the version's requests in flight are done, then unload its adapter from vLLM (every replica).
        It stays listed, `unloaded` (names are never reused); a restart does not load it again, a promote would.
        An unloaded version is answered as it is."""
        return await (await gw.registry.ready()).unload(name)

    @router.post("/admin/promote", responses=error_responses({
        **UPSTREAM_ERRORS,
        400: "the body does not validate, or vLLM refused to load the version again",
        404: "no such version (version_not_found)",
        409: "the version does not fit the base model vLLM serves (base_conflict)"}))
    async def promote(req: PromoteRequest) -> SwapResult:
        """Point the alias at a version; the previous one is drained, then unloaded (a full-weight version:
        its vLLM set is started and warmed first, and the old set drained, then stopped)."""
        result = await (await gw.registry.ready()).promote(req.version)
        if result.previous != result.serving:
            gw.metrics.swapped("promote", result.swap_ms)
        return result

    @router.post("/admin/rollback", responses=error_responses({
        **UPSTREAM_ERRORS,
        409: "no version served before this one (nothing_to_roll_back), or the previous one does not fit the base "
             "model vLLM serves (base_conflict)"}))
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
