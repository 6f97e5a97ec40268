"""One vLLM server over HTTP: the proxy's forwarding client and the registry's `AdapterControl`.

All traffic to vLLM goes through one aiohttp session (one keep-alive pool) created on the gateway's event
loop. aiohttp rather than httpx, measured (bench/gateway.py, issue 8): a keep-alive POST round trip on this
machine costs ~0.16 ms with aiohttp and ~1.3 ms with httpx's AsyncClient (its URL/header models, auth and
cookie flow, and httpcore's anyio-locked pool), and the gateway pays one per request. The admin client and
the SDK keep httpx; only this hop, which every request crosses, uses aiohttp.

Timeouts: connecting to vLLM (loopback) gets `CONNECT_TIMEOUT_S`; after that the limit is per read
(`request_timeout_s`), so a long stream lives as long as tokens keep coming. Pooled connections are dropped
after `UPSTREAM_KEEPALIVE_S`, below vLLM's own keep-alive timeout, so the gateway never sends a request on a
connection vLLM is closing.

Deliberately not here: choosing among several vLLM replicas (a pool of `Upstream`s would do that, and fan
the adapter calls out to all of them), retries (a request that failed upstream is reported, not repeated).
"""

from __future__ import annotations

import json
from typing import Any, Optional

import aiohttp

from . import _defaults as D
from .errors import UpstreamError

#: What the proxy catches from `post()` and from reading its answer.
UpstreamHTTPError = (aiohttp.ClientError, TimeoutError)


class Upstream:
    """Client of one vLLM OpenAI server at `base_url` (no `/v1`). Use from one event loop; `close()` at the end."""

    def __init__(self, base_url: str, *, read_timeout_s: float = D.REQUEST_TIMEOUT_S,
                 connect_timeout_s: float = D.CONNECT_TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: Optional[aiohttp.ClientSession] = None

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running loop (aiohttp binds a session to its loop).
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                self.base_url,
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=D.UPSTREAM_KEEPALIVE_S),
                timeout=self._timeout,
                auto_decompress=False,  # bytes pass through as vLLM sent them
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
            )
        return self._session

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- forwarding (the hot path) -----------------------------------------------------------
    async def post(self, path: str, body: bytes) -> aiohttp.ClientResponse:
        """POST the JSON `body` as given; returns once vLLM's status and headers are in, the body still to read
        (`r.content`). Use the answer as `async with r:` so its connection goes back to the pool (or is closed,
        when the body was not read to the end). Raises one of `UpstreamHTTPError`."""
        return await self._client().post(path, data=body, headers={"Content-Type": "application/json"})

    async def health(self) -> tuple[bool, str]:
        """(vLLM answers `/health` with 200, a detail for operators)."""
        try:
            async with self._client().get("/health", timeout=aiohttp.ClientTimeout(total=D.HEALTH_TIMEOUT_S)) as r:
                return r.status == 200, f"HTTP {r.status}"
        except UpstreamHTTPError as e:
            return False, self.describe(e)

    def describe(self, e: BaseException) -> str:
        """A one-line reason for a failure talking to vLLM (aiohttp's own reprs dump whole connection keys)."""
        if isinstance(e, aiohttp.ClientConnectorError):  # worded as httpx's was: dashboards show and match it
            return f"ConnectError: cannot connect to vLLM at {self.base_url} ({e.os_error})"
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__

    # ---- AdapterControl (see _registry) ------------------------------------------------------
    async def load(self, name: str, path: str) -> None:
        """`POST /v1/load_lora_adapter`; raises `UpstreamError` with vLLM's message on refusal."""
        await self._admin("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload(self, name: str) -> None:
        """`POST /v1/unload_lora_adapter`; raises `UpstreamError` on refusal (status 404: not loaded)."""
        await self._admin("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    async def models(self) -> dict[str, Optional[str]]:
        """`GET /v1/models` as {id: adapter path}; the path is None for base models."""
        body = await self._admin("GET", "/v1/models", None)
        out: dict[str, Optional[str]] = {}
        for card in body.get("data", []) if isinstance(body, dict) else []:
            # vLLM marks adapters with a `parent` (the base model); base models have none.
            out[card["id"]] = card.get("root") if card.get("parent") else None
        return out

    async def _admin(self, method: str, path: str, body: Optional[dict[str, Any]]) -> Any:
        try:
            async with self._client().request(method, path, json=body) as r:
                raw = await r.read()
                status = r.status
        except UpstreamHTTPError as e:
            raise UpstreamError(f"vLLM is not reachable ({self.describe(e)}); is it running?") from None
        if status != 200:
            raise UpstreamError(f"vLLM refused {path}: {_error_message(raw, status)}", status=status)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None  # load/unload answer plain text


def _error_message(raw: bytes, status: int) -> str:
    try:
        body = json.loads(raw)
        msg = body.get("error", {}).get("message") or body.get("message") or body
        return f"{msg} (HTTP {status})"
    except (ValueError, AttributeError):
        return f"{raw[:500].decode(errors='replace')} (HTTP {status})"
