"""The gateway's HTTP link to the collector, for what is not capture: forwarding feedback.

The server package never imports the collector (the layers in docs/architecture.md); it talks to the collector's HTTP API
with the collector's ingest key, like any client: `POST /v1/feedback` (feedback by response id). Captured
trajectories go through the SDK's `CollectorClient` instead (`_capture`), which spools them while the
collector is down; feedback is not spooled: the client is told to retry (503).

Deliberately not here: retries (callers decide), anything on the request path.
"""

from __future__ import annotations

from typing import Any, Optional

import httpx

#: Seconds for one call to the collector (it is on the same machine or network).
TIMEOUT_S = 10.0
#: Seconds the gateway's `/health` waits for the collector's.
HEALTH_TIMEOUT_S = 2.0


class CollectorUnavailable(Exception):
    """The collector could not be reached or failed (5xx); the message says which."""


class CollectorLink:
    """Async client of one collector. Create it inside the gateway's event loop; `close()` at the end."""

    def __init__(self, url: str, key: Optional[str], *, transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=TIMEOUT_S, transport=transport)

    async def close(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            r = await self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise CollectorUnavailable(f"the collector at {self.url} is not reachable ({type(e).__name__})") from None
        if r.status_code >= 500 or r.status_code in (401, 403):
            raise CollectorUnavailable(f"the collector at {self.url} answered {r.status_code} to {path}: {r.text[:300]}")
        return r

    async def health(self) -> tuple[bool, str]:
        """Whether the collector answers `GET /health` with 200 within HEALTH_TIMEOUT_S, and what to say if not."""
        try:
            r = await self._http.get("/health", timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError as e:
            return False, f"not reachable at {self.url} ({type(e).__name__})"
        if r.status_code != 200:
            return False, f"{self.url} answered {r.status_code}: {r.text[:200]}"
        return True, "ok"

    async def feedback(self, body: dict[str, Any]) -> httpx.Response:
        """`POST /v1/feedback`; the collector's answer (200, 404 for an unknown id, 422 for a bad body)."""
        return await self._call("POST", "/v1/feedback", json=body)
