"""The dashboard: one page, served by the collector, that answers "is the loop making the model better, and
is it safe?".

    GET /dashboard                      the page (static HTML, JS and CSS from `collector/static/dashboard`)
    GET /v1/dashboard/versions          the gateway's versions and swap history + the gate figures of each run
    GET /v1/dashboard/live?window=24h   success and feedback per version, app and task group; the time series
    GET /v1/dashboard/runs              retrain runs: trigger, decision, reason, gate figures
    GET /v1/dashboard/data              trajectories per app per day, score sources, exports, PII per type
    GET /v1/dashboard/health            gateway health, metrics and replicas, model/sandbox latency, sandbox pools
                                        per app, the Langfuse export

Who owns what, and how it gets here without breaking the layers (the collector imports neither `server`
nor `trainer`): the collector's own tables give the live, data and latency figures (`_dashboard_data`);
the trainer writes each retrain run into the collector's `events` table through `collector.record_event`
(`_events` says why a table and not an HTTP push); versions, swaps, canaries, rollbacks and gateway health
come from the gateway's own HTTP API (`/admin/versions`, `/admin/replicas`, `/health`, `/metrics`), asked at request time
with `gateway_url` and the admin token, both passed by the composition root (`looplift up`). A part that
does not answer is shown as unreachable with the reason; the other panels still render.

Errors are answered in the OpenAI shape like the rest of the collector's API (`_app`'s handlers).

Auth: the page itself holds no data and is served to anyone (HTML, JS, CSS, no secret); every data
endpoint needs `Authorization: Bearer <admin token>` (the gateway's, so operators have one token). The
link `looplift up` prints carries the token in the URL fragment (`/dashboard#token=...`), which browsers
never send to a server; the page moves it to `sessionStorage` and removes it from the address bar.
No build step, no CDN: the charts are SVG drawn by the page's own ~420 lines of JS; the page works offline.
"""

from __future__ import annotations

import hmac
import re
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from sdk import wire
from sdk.infra import error_responses

from . import _dashboard_data as D
from . import _defaults
from ._store import Store
from ._settings import CollectorSettings

if TYPE_CHECKING:
    from ._langfuse import LangfuseExporter

STATIC = Path(__file__).resolve().parent / "static" / "dashboard"
_FILES = {"index.html": "text/html; charset=utf-8", "dashboard.js": "text/javascript; charset=utf-8",
          "dashboard.css": "text/css; charset=utf-8"}
_WINDOW = re.compile(r"^(\d{1,4})([mhd])$")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400}
#: Gateway metric families shown as they are (the rest of /metrics is summarized or left out).
_METRIC_PREFIX = "looplift_gateway_"
_METRIC_HINTS = ("capture", "replica", "canary", "drop")
#: The `window` query parameter (`parse_window`), as the OpenAPI document describes it.
Window = Annotated[str, Query(description="a duration of up to 90 days: 30m, 1h, 24h, 7d (400 otherwise)")]
#: Rows of the gateway's `/admin/replicas` table shown (a gateway has a handful).
_MAX_REPLICAS = 32


def parse_window(value: str) -> timedelta:
    """`30m`, `1h`, `24h`, `7d` -> a timedelta (at most 90 days); 400 otherwise."""
    m = _WINDOW.match(value.strip())
    seconds = int(m.group(1)) * _UNIT_S[m.group(2)] if m else 0
    if not 0 < seconds <= 90 * 86400:
        raise HTTPException(status_code=400, detail=f"window {value!r} is not a duration of up to 90 days: write it "
                                                    "like 30m, 1h, 24h or 7d")
    return timedelta(seconds=seconds)


def _metrics_summary(text: str) -> dict[str, Any]:
    """Requests and in-flight per version, upstream errors, swaps, and every capture/replica/canary/drop family."""
    from prometheus_client.parser import text_string_to_metric_families

    by_version: dict[str, dict[str, float]] = {}
    other: list[dict[str, Any]] = []
    errors = 0.0
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(_METRIC_PREFIX):
            continue
        for s in fam.samples:
            if s.name.endswith(("_bucket", "_created", "_sum")) or (s.name.endswith("_count") and fam.type == "histogram"):
                continue
            if fam.name == "looplift_gateway_requests":
                v = by_version.setdefault(s.labels.get("version") or "none", {"requests": 0.0, "errors": 0.0})
                v["requests"] += s.value
                if not str(s.labels.get("status", "200")).startswith("2"):
                    v["errors"] += s.value
            elif fam.name == "looplift_gateway_in_flight":
                by_version.setdefault(s.labels.get("version") or "none", {"requests": 0.0, "errors": 0.0})["in_flight"] = s.value
            elif fam.name == "looplift_gateway_upstream_errors":
                errors += s.value
            elif fam.name == "looplift_gateway_swaps" or any(h in fam.name for h in _METRIC_HINTS):
                other.append({"name": s.name, "labels": dict(s.labels), "value": s.value})
    return {"by_version": by_version, "upstream_errors": errors, "other": other[:100]}


class _Gateway:
    """The gateway's HTTP API, asked with short timeouts; every failure becomes a one-line reason."""

    def __init__(self, url: str | None, token: str | None) -> None:
        self.url = url.rstrip("/") if url else None
        self.token = token

    async def _get(self, client: httpx.AsyncClient, path: str, *, admin: bool = False) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if admin and self.token else {}
        r = await client.get(self.url + path, headers=headers)  # type: ignore[operator]
        return r.status_code, (r.json() if "json" in r.headers.get("content-type", "") else r.text)

    async def versions(self) -> dict[str, Any]:
        if not self.url:
            return {"error": f"no gateway configured: start the collector with --gateway URL (or "
                             f"{_defaults.ENV_GATEWAY_URL}); `looplift up` passes its own"}
        try:
            async with httpx.AsyncClient(timeout=_defaults.GATEWAY_TIMEOUT_S) as c:
                status, body = await self._get(c, "/admin/versions", admin=True)
        except httpx.HTTPError as e:
            return {"error": f"gateway {self.url} unreachable: {type(e).__name__}: {e}"}
        if status != 200:
            detail = wire.error_message(body) or str(body)[:200]
            return {"error": f"gateway {self.url} /admin/versions answered {status}: {detail}"}
        return {"url": self.url, **body}

    async def health(self) -> dict[str, Any]:
        if not self.url:
            return {"status": "not configured"}
        out: dict[str, Any] = {"url": self.url}
        try:
            async with httpx.AsyncClient(timeout=_defaults.GATEWAY_TIMEOUT_S) as c:
                status, body = await self._get(c, "/health")
                out["status"] = body.get("status", f"HTTP {status}") if isinstance(body, dict) else f"HTTP {status}"
                out["health"] = body
                status, text = await self._get(c, "/metrics")
                if status == 200 and isinstance(text, str):
                    out["metrics"] = _metrics_summary(text)
                status, replicas = await self._get(c, "/admin/replicas", admin=True)
                if status == 200 and isinstance(replicas, list):  # url, healthy, in_flight, versions per vLLM
                    out["replicas"] = replicas[:_MAX_REPLICAS]
        except httpx.HTTPError as e:
            out.update(status="unreachable", error=f"{type(e).__name__}: {e}")
        return out


def dashboard_router(settings: CollectorSettings, store: Store, langfuse: LangfuseExporter | None = None) -> APIRouter:
    """The page and its data endpoints (see the module docstring)."""
    token = settings.admin_token.get_secret_value() if settings.admin_token is not None else None
    gateway = _Gateway(settings.gateway_url, token)
    router = APIRouter()

    def require_admin(request: Request) -> None:
        if token is None:
            raise HTTPException(status_code=503, detail=(
                f"the dashboard is off: no admin token. Set {_defaults.ENV_ADMIN_TOKEN} (the gateway's admin token) "
                f"or put it in $LOOPLIFT_HOME/{_defaults.ADMIN_TOKEN_FILE} and restart the collector"))
        given = wire.bearer_token(request.headers.get("authorization")) or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(status_code=401, headers={"WWW-Authenticate": "Bearer"}, detail=(
                "the dashboard's data needs `Authorization: Bearer <admin token>` (the gateway's admin token, "
                f"${_defaults.ENV_ADMIN_TOKEN} or $LOOPLIFT_HOME/{_defaults.ADMIN_TOKEN_FILE}); open the link "
                "`looplift up` prints, or /dashboard#token=TOKEN"))

    admin = [Depends(require_admin)]
    # What every data route answers besides 200 (`require_admin`); the two with a `window` add 400.
    refused = error_responses({401: "no admin token, or not the gateway's (unauthorized)",
                               503: "the collector has no admin token: the dashboard is off (unavailable)"})
    with_window = refused | error_responses({400: "`window` is not a duration of up to 90 days (invalid_request)"})

    @router.get("/dashboard", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type=_FILES["index.html"],
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})

    @router.get("/dashboard/static/{name}", include_in_schema=False)
    async def static(name: str) -> FileResponse:
        if name not in _FILES:
            raise HTTPException(status_code=404, detail=f"no dashboard file {name!r}")
        return FileResponse(STATIC / name, media_type=_FILES[name], headers={"Cache-Control": "no-cache"})

    @router.get("/v1/dashboard/versions", dependencies=admin, responses=refused)
    async def versions() -> dict[str, Any]:
        """The gateway's versions and history, and each retrain run's gate figures."""
        return {"gateway": await gateway.versions(), "runs": await run_in_threadpool(D.runs, store),
                "now": D.now_iso()}

    @router.get("/v1/dashboard/live", dependencies=admin, responses=with_window)
    async def live(window: Window = "24h") -> dict[str, Any]:
        """Success and feedback per served version, app and task group over `window`."""
        return await run_in_threadpool(D.live, store, parse_window(window))

    @router.get("/v1/dashboard/runs", dependencies=admin, responses=refused)
    async def runs() -> list[dict[str, Any]]:
        """The newest retrain runs (trigger, status, reason, gate figures), oldest first."""
        return await run_in_threadpool(D.runs, store)

    @router.get("/v1/dashboard/data", dependencies=admin, responses=refused)
    async def data() -> dict[str, Any]:
        """Trajectories per app per day (30 days), score sources, PII replaced per type, exports."""
        return await run_in_threadpool(D.data, store)

    @router.get("/v1/dashboard/health", dependencies=admin, responses=with_window)
    async def health(window: Window = "24h") -> dict[str, Any]:
        """The gateway's health and metrics, model and sandbox latency per app, the Langfuse export."""
        lat = await run_in_threadpool(D.latency, store, parse_window(window))
        return {"gateway": await gateway.health(), "latency": lat, "collector": {"status": "ok", "database": store.dialect},
                "langfuse": langfuse.to_dict() if langfuse is not None else {"enabled": False}, "now": D.now_iso()}

    return router
