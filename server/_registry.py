"""Versions, the alias, and hot-swapping them on a running vLLM.

The registry is the gateway's single source of truth for "which version answers the alias". It:

* names versions `<alias>-v0` (the base model vLLM serves itself), `<alias>-v1`, ...;
* counts in-flight requests per version (`acquire` -> `Lease.release`);
* flips the alias atomically: `acquire` resolves and counts without awaiting, and the flip is a
  plain assignment on the event loop, so no request can see half a swap;
* after a flip, drains the previous version in a background task (waits for its in-flight count to
  reach 0) and only then unloads its adapter from vLLM — a request never loses its adapter;
* persists versions, the alias's serving stack and an audit history to `registry.json` atomically
  (tmp file + rename), and on start reconciles with what vLLM actually has loaded.

It deliberately does not validate HTTP input, count metrics, or start vLLM; it is not thread-safe
(use it from one event loop).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import httpx

from sdk.infra import atomic_write_json

from . import _defaults as D
from ._models import HistoryEvent, SwapResult, VersionInfo, VersionState, VersionsView
from ._settings import GatewaySettings, valid_name, version_name
from ._validate import validate_adapter
from .errors import (
    InvalidNameError,
    NothingToRollBackError,
    UpstreamError,
    VersionExistsError,
    VersionNotFoundError,
)

log = logging.getLogger("looplift.server.registry")

_SCHEMA = 1
_HISTORY_MAX = 1000


def _now() -> datetime:
    return datetime.now(timezone.utc)


class VLLMAdapters:
    """The three vLLM endpoints the registry needs, over the gateway's shared `httpx.AsyncClient`."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def load(self, name: str, path: str) -> None:
        """`POST /v1/load_lora_adapter`; raises `UpstreamError` with vLLM's message on refusal."""
        await self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload(self, name: str) -> None:
        """`POST /v1/unload_lora_adapter`; raises `UpstreamError` on refusal (status 404: not loaded)."""
        await self._post("/v1/unload_lora_adapter", {"lora_name": name})

    async def models(self) -> dict[str, Optional[str]]:
        """`GET /v1/models` as {id: adapter path}; the path is None for base models."""
        try:
            r = await self._client.get("/v1/models")
        except httpx.HTTPError as e:
            raise UpstreamError(f"vLLM is not reachable ({e!r}); is it running?") from None
        if r.status_code != 200:
            raise UpstreamError(f"vLLM /v1/models answered {r.status_code}: {r.text[:500]}", status=r.status_code)
        out: dict[str, Optional[str]] = {}
        for card in r.json().get("data", []):
            # vLLM marks adapters with a `parent` (the base model); base models have none.
            out[card["id"]] = card.get("root") if card.get("parent") else None
        return out

    async def _post(self, path: str, body: dict[str, Any]) -> None:
        try:
            r = await self._client.post(path, json=body)
        except httpx.HTTPError as e:
            raise UpstreamError(f"vLLM is not reachable ({e!r}); is it running?") from None
        if r.status_code != 200:
            raise UpstreamError(f"vLLM refused {path}: {_error_message(r)}", status=r.status_code)


def _error_message(r: httpx.Response) -> str:
    try:
        body = r.json()
        msg = body.get("error", {}).get("message") or body.get("message") or body
        return f"{msg} (HTTP {r.status_code})"
    except (ValueError, AttributeError):
        return f"{r.text[:500]} (HTTP {r.status_code})"


@dataclass
class Version:
    """Runtime record of one version (the persisted part is name, adapter_path, created_at, state)."""

    name: str
    adapter_path: Optional[str]
    created_at: datetime
    state: VersionState
    in_flight: int = 0


@dataclass
class Lease:
    """One request's hold on a version; `release()` is idempotent so every exit path may call it."""

    version: str
    _registry: "Registry"
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        """Give the hold back (safe to call more than once)."""
        if not self._released:
            self._released = True
            self._registry._release(self.version)


class Registry:
    """Versions + alias over one vLLM. Call `await start()` once inside the event loop before use."""

    def __init__(
        self,
        settings: GatewaySettings,
        adapters: VLLMAdapters,
        *,
        on_in_flight: Optional[Callable[[str, int], None]] = None,
    ) -> None:
        self.settings = settings
        self.alias = settings.alias
        self._adapters = adapters
        self._on_in_flight = on_in_flight
        self.versions: dict[str, Version] = {}
        #: Serving history as a stack: the top is serving; rollback pops it.
        self.stack: list[str] = []
        self.history: list[HistoryEvent] = []
        self._lock = asyncio.Lock()
        self._drains: set[asyncio.Task[None]] = set()
        self.started = False

    # ---- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Read `registry.json`, reconcile with vLLM's loaded adapters, and re-load the serving version."""
        async with self._lock:
            self._read_file()
            served = await self._adapters.models()
            base = self.settings.base_version
            if base not in served or served[base] is not None:
                raise UpstreamError(
                    f"vLLM does not serve the base model as {base!r} (it serves {sorted(served)}); "
                    f"start vLLM with --served-model-name {base}"
                )
            # The gateway owns the adapter namespace of its vLLM: anything loaded there that the
            # registry does not know (or knows under another path) is a leftover and is unloaded,
            # so that version names can be reused safely.
            for vid, root in served.items():
                if root is None:
                    continue
                v = self.versions.get(vid)
                if v is None or not _same_path(v.adapter_path, root):
                    await self._adapters.unload(vid)
            for v in self.versions.values():
                if v.adapter_path is not None:
                    root = served.get(v.name)
                    v.state = "loaded" if root is not None and _same_path(v.adapter_path, root) else "unloaded"
            await self._restore_serving()
            self._write_file()
            self.started = True

    async def _restore_serving(self) -> None:
        # A restart must serve the same version; if its adapter has vanished, fall back down the stack.
        while True:
            v = self.versions[self.stack[-1]]
            if v.state == "loaded":
                return
            try:
                assert v.adapter_path is not None
                await self._adapters.load(v.name, v.adapter_path)
                v.state = "loaded"
                self._event("restore", v.name, detail="re-loaded after restart")
                return
            except UpstreamError as e:
                log.error("cannot re-load serving version %s: %s; falling back", v.name, e)
                popped = self.stack.pop()
                self._event("rollback", self.stack[-1], previous=popped, detail=f"restore failed: {e}")

    async def close(self) -> None:
        """Cancel pending drain tasks (their adapters stay loaded; the next start reconciles)."""
        tasks = list(self._drains)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_drained(self, timeout: float = 60.0) -> None:
        """Wait until every pending drain-and-unload task has finished (for tests and orderly shutdown)."""
        if self._drains:
            await asyncio.wait_for(asyncio.gather(*list(self._drains), return_exceptions=True), timeout)

    # ---- requests -------------------------------------------------------------------------
    @property
    def serving(self) -> str:
        """The version the alias points at."""
        return self.stack[-1]

    def acquire(self, model: str) -> Optional[Lease]:
        """Resolve `model` (the alias or a loaded version name) and count a request on it; None if unknown.

        Synchronous on purpose: with no await between resolving and counting, a concurrent promote can
        never unload the version this request was routed to.
        """
        name = self.serving if model == self.alias else model
        v = self.versions.get(name)
        if v is None or v.state != "loaded":
            return None
        v.in_flight += 1
        if self._on_in_flight:
            self._on_in_flight(name, v.in_flight)
        return Lease(name, self)

    def _release(self, name: str) -> None:
        v = self.versions.get(name)
        if v is not None and v.in_flight > 0:
            v.in_flight -= 1
            if self._on_in_flight:
                self._on_in_flight(name, v.in_flight)

    def model_ids(self) -> list[str]:
        """The alias and every loaded version, for `/v1/models`."""
        return [self.alias] + [v.name for v in self.versions.values() if v.state == "loaded"]

    # ---- admin ----------------------------------------------------------------------------
    def view(self) -> VersionsView:
        """A snapshot of the registry for the admin API."""
        return VersionsView(
            alias=self.alias,
            serving=self.serving,
            versions=[self._info(v) for v in self.versions.values()],
            history=list(self.history),
        )

    def _info(self, v: Version) -> VersionInfo:
        return VersionInfo(
            name=v.name, adapter_path=v.adapter_path, state=v.state, created_at=v.created_at,
            in_flight=v.in_flight, serving=v.name == self.serving,
        )

    async def load(self, path: str, name: Optional[str] = None) -> VersionInfo:
        """Validate an adapter directory, load it into vLLM as a new version, register it (not promoted)."""
        adapter = validate_adapter(path, self.settings.max_lora_rank)
        async with self._lock:
            if name is not None:
                if not valid_name(name):
                    raise InvalidNameError(name)
                if name in self.versions or name == self.alias:
                    raise VersionExistsError(name)
            else:
                name = self._next_name()
            # vLLM first: if it refuses, nothing here has changed.
            await self._adapters.load(name, str(adapter))
            v = Version(name=name, adapter_path=str(adapter), created_at=_now(), state="loaded")
            self.versions[name] = v
            self._event("load", name, detail=str(adapter))
            self._write_file()
            return self._info(v)

    async def promote(self, name: str) -> SwapResult:
        """Point the alias at `name` (re-loading its adapter if needed); drain and unload the previous one."""
        t0 = time.perf_counter()
        async with self._lock:
            v = self.versions.get(name)
            if v is None:
                raise VersionNotFoundError(name, list(self.versions))
            previous = self.serving
            if name == previous:
                return SwapResult(alias=self.alias, serving=name, previous=previous, swap_ms=0.0)
            await self._ensure_loaded(v)
            self.stack.append(name)  # the flip: one assignment, seen by the next acquire()
            swap_ms = (time.perf_counter() - t0) * 1000
            self._event("promote", name, previous=previous, detail=f"swap {swap_ms:.1f} ms")
            self._write_file()
            self._schedule_drain(previous)
            return SwapResult(alias=self.alias, serving=name, previous=previous, swap_ms=swap_ms)

    async def rollback(self) -> SwapResult:
        """Serve the previously serving version again; the current one is drained and unloaded."""
        t0 = time.perf_counter()
        async with self._lock:
            if len(self.stack) < 2:
                raise NothingToRollBackError(
                    f"nothing to roll back to: {self.serving!r} is the only version the alias "
                    f"{self.alias!r} has served; promote another version instead."
                )
            target = self.versions[self.stack[-2]]
            await self._ensure_loaded(target)
            previous = self.stack.pop()
            swap_ms = (time.perf_counter() - t0) * 1000
            self._event("rollback", target.name, previous=previous, detail=f"swap {swap_ms:.1f} ms")
            self._write_file()
            self._schedule_drain(previous)
            return SwapResult(alias=self.alias, serving=target.name, previous=previous, swap_ms=swap_ms)

    async def _ensure_loaded(self, v: Version) -> None:
        if v.state == "loaded":
            return
        assert v.adapter_path is not None  # the base version is never unloaded
        await self._adapters.load(v.name, v.adapter_path)
        v.state = "loaded"
        self._event("load", v.name, detail=f"re-loaded {v.adapter_path}")

    def _next_name(self) -> str:
        pat = re.compile(re.escape(self.alias) + r"-v(\d+)$")
        used = [int(m.group(1)) for n in self.versions if (m := pat.match(n))]
        return version_name(self.alias, max(used, default=0) + 1)

    # ---- drain ----------------------------------------------------------------------------
    def _schedule_drain(self, name: str) -> None:
        if self.versions[name].adapter_path is None:
            return  # the base model is part of vLLM itself and stays loaded
        task = asyncio.get_running_loop().create_task(self._drain(name), name=f"drain-{name}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, name: str) -> None:
        v = self.versions[name]
        while True:
            if name == self.serving or v.state != "loaded":
                return  # promoted again (or already unloaded) while draining
            if v.in_flight == 0:
                async with self._lock:
                    # Re-check under the lock: a promote or a direct request may have come in.
                    if name == self.serving or v.state != "loaded":
                        return
                    if v.in_flight == 0:
                        # Marked before the await so no new request is routed to it mid-unload.
                        v.state = "unloaded"
                        try:
                            await self._adapters.unload(name)
                        except UpstreamError as e:
                            if e.status != 404:  # 404: vLLM already dropped it, which is the goal
                                v.state = "loaded"
                                log.error("unloading %s failed: %s", name, e)
                                return
                        self._event("unload", name, detail="drained: 0 requests in flight")
                        self._write_file()
                        return
            await asyncio.sleep(D.DRAIN_POLL_S)

    # ---- persistence ----------------------------------------------------------------------
    def _event(self, action: str, version: str, previous: Optional[str] = None, detail: Optional[str] = None) -> None:
        self.history.append(
            HistoryEvent(at=_now(), action=action, version=version, previous=previous, detail=detail)  # type: ignore[arg-type]
        )
        del self.history[:-_HISTORY_MAX]

    def _fresh(self) -> None:
        base = self.settings.base_version
        self.versions = {base: Version(name=base, adapter_path=None, created_at=_now(), state="loaded")}
        self.stack = [base]
        self.history = []

    def _read_file(self) -> None:
        path = self.settings.registry_path
        self._fresh()
        if not path.is_file():
            return
        try:
            data = json.loads(path.read_text())
            if data.get("schema") != _SCHEMA or data.get("alias") != self.alias:
                log.warning("ignoring %s: other schema or alias", path)
                return
            versions = {
                d["name"]: Version(
                    name=d["name"], adapter_path=d.get("adapter_path"),
                    created_at=datetime.fromisoformat(d["created_at"]), state="unloaded",
                )
                for d in data["versions"]
            }
            stack = [n for n in data["stack"] if n in versions]
            history = [HistoryEvent.model_validate(h) for h in data.get("history", [])]
        except (ValueError, KeyError, TypeError) as e:
            # A corrupt file must not keep the gateway down; start fresh and keep the bad file aside.
            log.error("registry file %s unreadable (%s); starting fresh", path, e)
            path.rename(path.with_suffix(".corrupt"))
            return
        base = self.settings.base_version
        versions.setdefault(base, self.versions[base])
        versions[base].state = "loaded"
        self.versions = versions
        self.stack = stack if stack and stack[0] == base else [base] + stack
        self.history = history

    def _write_file(self) -> None:
        path = self.settings.registry_path
        data = {
            "schema": _SCHEMA,
            "alias": self.alias,
            "serving": self.serving,
            "versions": [
                {"name": v.name, "adapter_path": v.adapter_path, "created_at": v.created_at.isoformat(),
                 "state": v.state}
                for v in self.versions.values()
            ],
            "stack": self.stack,
            "history": [h.model_dump(mode="json") for h in self.history],
        }
        atomic_write_json(path, data)  # readers see the old or the new file, never half


def _same_path(a: Optional[str], b: Optional[str]) -> bool:
    if a is None or b is None:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)
