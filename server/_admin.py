"""`AdminClient`: a small httpx client for the gateway's `/admin` API (the trainer publishes with it).

Answers are parsed into the pydantic models of `_models`; failures raise the matching `ServerError`
subclass carrying the gateway's message (401 -> `AdminAuthError`, 404 -> `VersionNotFoundError`, ...).
It does not retry a request the gateway received: a publish step should fail loudly and be re-run. With
`connect_wait_s` it keeps trying, that long, a gateway that refuses connections (restarting: `looplift up`
takes a minute or two to come back), which is safe because nothing was sent.
"""

from __future__ import annotations

import time
from typing import Any, Optional, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from . import _defaults as D
from ._models import CanaryDecisionKind, CanaryView, Figures, ReplicaInfo, SwapResult, VersionInfo, VersionsView
from ._settings import require_admin_token
from .errors import (
    AdapterInvalidError,
    AdminAuthError,
    BaseConflictError,
    CanaryError,
    InvalidNameError,
    NothingToRollBackError,
    ServerError,
    UpstreamError,
    VersionExistsError,
    VersionNotFoundError,
)

T = TypeVar("T", bound=BaseModel)


class AdminClient:
    """Client of the gateway admin API. `token` defaults to `$LOOPLIFT_ADMIN_TOKEN` or the token file."""

    def __init__(
        self,
        base_url: str = D.GATEWAY_URL,
        token: Optional[str] = None,
        *,
        timeout: float = D.ADMIN_TIMEOUT_S,
        transport: Optional[httpx.BaseTransport] = None,
        connect_wait_s: float = 0.0,
    ) -> None:
        """`connect_wait_s`: how long a request keeps retrying (every second) while the gateway refuses connections;
        0 fails at once."""
        self.base_url = base_url.rstrip("/")
        self._connect_wait_s = connect_wait_s
        self._client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {require_admin_token(token)}"},
            timeout=timeout,
            transport=transport,
        )

    def versions(self) -> VersionsView:
        """Every version, the alias, what it serves, and the history."""
        return self._call("GET", "/admin/versions", VersionsView)

    def replicas(self) -> list[ReplicaInfo]:
        """Every vLLM upstream of the gateway: url, pid, healthy, in flight, versions."""
        r = self._request("GET", "/admin/replicas")
        return [ReplicaInfo.model_validate(x) for x in r.json()]

    def load(self, path: str, name: Optional[str] = None) -> VersionInfo:
        """Validate and load an adapter directory (or register a full checkpoint) as a new version (not
        promoted). The path is read by the gateway's vLLM, so it must exist on that machine."""
        body: dict[str, str] = {"path": str(path)}
        if name is not None:
            body["name"] = name
        return self._call("POST", "/admin/versions", VersionInfo, body)

    def unload(self, version: str) -> VersionInfo:
        """Unload `version`'s adapter from vLLM once its requests in flight are done; it stays registered, unloaded.
        A 409 (`ServerError`, `CanaryError`, `BaseConflictError`) when it serves, is the canary's candidate or is a
        base model."""
        return self._call("DELETE", f"/admin/versions/{quote(version, safe='')}", VersionInfo)

    def promote(self, version: str) -> SwapResult:
        """Point the alias at `version`."""
        return self._call("POST", "/admin/promote", SwapResult, {"version": version})

    def rollback(self) -> SwapResult:
        """Serve the previously serving version again."""
        return self._call("POST", "/admin/rollback", SwapResult, {})

    def canary(self) -> CanaryView:
        """The running canary (None when none runs) and the recent canary decisions."""
        return self._call("GET", "/admin/canary", CanaryView)

    def start_canary(self, version: str, fraction: float) -> CanaryView:
        """Send `fraction` (0 < f < 1) of the alias's traffic to the loaded `version`."""
        return self._call("POST", "/admin/canary", CanaryView, {"version": version, "fraction": fraction})

    def stop_canary(self) -> CanaryView:
        """End the running canary (its candidate is drained, then unloaded)."""
        return self._call("DELETE", "/admin/canary", CanaryView)

    def decide_canary(self, version: str, decision: CanaryDecisionKind, reason: str,
                      figures: Optional[Figures] = None) -> CanaryView:
        """Record an automatic decision with its figures and have the gateway act on it: `promote` / `drop` the
        running canary of `version`, or `rollback` the alias from `version`. `CanaryError` when stale."""
        return self._call("POST", "/admin/canary/decision", CanaryView,
                          {"version": version, "decision": decision, "reason": reason, "figures": figures or {}})

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, model: type[T], body: Optional[dict[str, Any]] = None) -> T:
        return model.model_validate(self._request(method, path, body).json())

    def _request(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> httpx.Response:
        deadline = time.monotonic() + self._connect_wait_s
        while True:
            try:
                r = self._client.request(method, path, json=body)
                break
            except httpx.ConnectError as e:  # refused before anything was sent: safe to try again
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._unreachable(e) from None
                time.sleep(min(1.0, left))
            except httpx.HTTPError as e:
                raise self._unreachable(e) from None
        if r.is_success:
            return r
        raise _to_error(r)

    def _unreachable(self, e: httpx.HTTPError) -> ServerError:
        waited = f" (tried for {self._connect_wait_s:.0f} s)" if self._connect_wait_s else ""
        return ServerError(f"cannot reach the gateway at {self.base_url}{waited} ({e!r}); is `looplift server start` "
                           "running there, and is --url right?")


# The gateway's error `code` -> the class the client raises. Classes whose constructors take structured
# arguments are rebuilt from the message alone, since that is what travels over the wire.
_BY_CODE: dict[str, type[ServerError]] = {
    "invalid_admin_token": AdminAuthError,
    "version_not_found": VersionNotFoundError,
    "version_exists": VersionExistsError,
    "nothing_to_roll_back": NothingToRollBackError,
    "invalid_adapter": AdapterInvalidError,
    "invalid_version_name": InvalidNameError,
    "upstream_error": UpstreamError,
    "canary_conflict": CanaryError,
    "base_conflict": BaseConflictError,
}


def _to_error(r: httpx.Response) -> ServerError:
    try:
        err = r.json().get("error", {})
        message, code = str(err.get("message") or r.text), err.get("code")
    except (ValueError, AttributeError):
        message, code = r.text[:500] or f"HTTP {r.status_code}", None
    cls = _BY_CODE.get(code or "")
    if cls is None:
        cls = AdminAuthError if r.status_code == 401 else UpstreamError if r.status_code >= 502 else ServerError
    e = cls.__new__(cls)
    ServerError.__init__(e, message)
    e.http_status = r.status_code
    if isinstance(e, UpstreamError):
        e.status = r.status_code
    return e
