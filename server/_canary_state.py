"""The registry's canary: which canary runs, and the operations that start, end, decide and resume it.

`CanaryState` is a part of the `_registry.Registry` (the registry holds one and delegates its canary calls to
it); the split itself, who answers an alias request, is `_canary.Canary`. What it does:

* `start(name, fraction)` sends that share of the alias's requests to a loaded candidate (a running canary of
  the same version only changes its fraction); `stop()` ends it, and its candidate is drained, then unloaded;
* `decide(req)` records an automatic decision with its figures and acts on it: promote the candidate, drop it,
  or roll back a watched promotion;
* `end_on_flip(action, serving)`: any flip of the alias ends a running canary;
* `resume(c)`: the canary saved in `registry.json` goes on after a restart (its candidate re-loaded); if it
  cannot, an `end` event says why.

Every start, decision and end is a `canary` history event, and every change is saved with the registry. The
operations run under the registry's admin lock (the one its loads, promotes and rollbacks hold), so they run
one after the other with those.

Deliberately not here: the split and its hash (`_canary`), the flips themselves (the registry's promote and
rollback, reached through `CanaryHost`), reading and writing `registry.json` (`_registry_file`), and judging
whether a candidate is better (the trainer's canary watch, which calls the admin API).
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Optional, Protocol

from ._canary import Canary
from ._models import CanaryDecisionRequest, CanaryInfo, CanaryView, Figures, HistoryAction, HistoryEvent, SwapResult
from .errors import BaseConflictError, CanaryError, UpstreamError, VersionNotFoundError

if TYPE_CHECKING:
    from ._registry import Version

# The registry's logger: canary messages are registry messages to an operator.
log = logging.getLogger("looplift.server.registry")

#: Canary events `GET /admin/canary` returns.
_CANARY_EVENTS = 50


class CanaryHost(Protocol):
    """What the canary needs from the registry it is part of. The calls are made with the admin lock held."""

    alias: str
    versions: dict[str, Version]
    #: The alias's serving history; the top is serving.
    stack: list[str]
    history: list[HistoryEvent]

    @property
    def serving(self) -> str:
        """The version the alias points at."""

    def record(self, action: HistoryAction, version: str, previous: Optional[str] = None,
               detail: Optional[str] = None, canary: Optional[str] = None, figures: Optional[Figures] = None) -> None:
        """Append a history event."""

    def save(self) -> None:
        """Write `registry.json` (the canary's part from `CanaryState.info`)."""

    def drain_later(self, name: str) -> None:
        """Unload `name` once its last request is done."""

    async def ensure_loaded(self, v: Version, action: HistoryAction = "load", detail: Optional[str] = None) -> None:
        """Load `v`'s adapter if it is not loaded; raises with nothing changed."""

    async def promote_locked(self, name: str, t0: float) -> SwapResult:
        """Promote `name` (the lock is held); ends the running canary through `end_on_flip`."""

    async def rollback_locked(self, t0: float) -> SwapResult:
        """Roll back (the lock is held); ends the running canary through `end_on_flip`."""


def _routed(c: Canary) -> Figures:
    return {"routed_candidate": c.routed_candidate, "routed_serving": c.routed_serving}


class CanaryState:
    """The running canary of one registry, if any, and its operations (see the module docstring)."""

    def __init__(self, host: CanaryHost, lock: asyncio.Lock) -> None:
        self._host = host
        #: The registry's admin lock.
        self._lock = lock
        #: The running canary (saved with the registry; `resume` picks it up after a restart).
        self.running: Optional[Canary] = None

    # ---- requests and the registry's own use ----------------------------------------------
    def route(self, serving: Optional[Version], session: Optional[str]) -> Optional[Version]:
        """The version an alias request goes to: while a canary runs, the candidate for its share of the requests
        (sticky per `session`, the X-Looplift-Session header), if it is loaded; else `serving`."""
        c = self.running
        if c is None or not c.takes(session):
            return serving
        candidate = self._host.versions.get(c.version)
        return candidate if candidate is not None and candidate.state == "loaded" else serving

    def is_candidate(self, name: str) -> bool:
        """Whether `name` is the running canary's candidate."""
        return self.running is not None and self.running.version == name

    def info(self) -> Optional[CanaryInfo]:
        """The running canary as `registry.json` and the admin API show it; None when none runs."""
        return self.running.info() if self.running else None

    def reset(self) -> None:
        """Forget the running canary (the registry is being read again from its file)."""
        self.running = None

    def view(self) -> CanaryView:
        """The running canary and the recent canary events (for `GET /admin/canary`)."""
        host = self._host
        events = [h for h in host.history if h.action == "canary"][-_CANARY_EVENTS:]
        return CanaryView(alias=host.alias, serving=host.serving, canary=self.info(), decisions=events)

    # ---- the admin operations ---------------------------------------------------------------
    async def start(self, name: str, fraction: float) -> CanaryView:
        """Send `fraction` (0 < f < 1) of alias requests to the loaded version `name`; a running canary of the
        same version only changes its fraction. Raises `VersionNotFoundError` or `CanaryError` (with the fix)."""
        if not 0.0 < fraction < 1.0:
            raise CanaryError(f"fraction must be strictly between 0 and 1, got {fraction}", http_status=400)
        host = self._host
        async with self._lock:
            self._check_candidate(name)
            c = self.running
            if c is not None and c.version != name:
                raise CanaryError(f"a canary of {c.version!r} is running; end it first (DELETE /admin/canary)")
            if c is not None:
                c.fraction = fraction
            else:
                self.running = Canary(version=name, fraction=fraction, started_at=datetime.now(timezone.utc))
            host.record("canary", name, previous=host.serving, canary="start",
                        detail=f"{fraction:.0%} of {host.alias!r} traffic to {name} (serving {host.serving})",
                        figures={"fraction": fraction})
            host.save()
            return self.view()

    def _check_candidate(self, name: str) -> None:
        """Raise unless `name` can be a canary's candidate: registered, not serving, an adapter, loaded."""
        host = self._host
        v = host.versions.get(name)
        if v is None:
            raise VersionNotFoundError(name, list(host.versions))
        if name == host.serving:
            raise CanaryError(f"{name!r} already serves the alias {host.alias!r}; a canary needs another "
                              "version (load one with POST /admin/versions)", http_status=400)
        if v.adapter_path is None:
            raise CanaryError(f"{name!r} is a full-weight version: a canary shares one vLLM set; promote it "
                              "(blue/green) and roll back if it does worse", http_status=409)
        if v.state != "loaded":
            raise CanaryError(f"{name!r} is not loaded in vLLM; load it first (POST /admin/versions, or "
                              "`looplift server load`) and start the canary again", http_status=400)

    async def stop(self, reason: str = "ended by the operator", figures: Optional[Figures] = None) -> CanaryView:
        """End the running canary (its candidate is drained, then unloaded); `CanaryError` when none runs."""
        async with self._lock:
            c = self.running
            if c is None:
                raise CanaryError("no canary is running; start one with POST /admin/canary", http_status=404)
            self._drop(c, "drop", reason, figures)
            return self.view()

    async def decide(self, req: CanaryDecisionRequest) -> tuple[CanaryView, Optional[SwapResult]]:
        """Record an automatic decision with its figures and act on it (see `CanaryDecisionRequest`); returns the
        canary view after it, and the alias flip it made (None for a drop)."""
        t0 = time.perf_counter()
        async with self._lock:
            if req.decision == "rollback":
                return await self._roll_back_watched(req, t0)
            c = self.running
            if c is None or c.version != req.version:
                running = f"the running canary is {c.version!r}" if c else "no canary is running"
                raise CanaryError(f"cannot {req.decision} {req.version!r}: {running}")
            if req.decision == "drop":
                self._drop(c, "drop", req.reason, req.figures)
                return self.view(), None
            return await self._promote_candidate(c, req, t0)

    async def _roll_back_watched(self, req: CanaryDecisionRequest, t0: float) -> tuple[CanaryView, SwapResult]:
        """A watched promotion did worse: serve the version before it again."""
        host = self._host
        if host.serving != req.version or len(host.stack) < 2:
            raise CanaryError(f"the alias serves {host.serving!r}, not a rollback-able {req.version!r}: this "
                              "decision is stale (the state changed since it was made)")
        result = await host.rollback_locked(t0)  # a refusal raises before anything is recorded
        host.record("canary", req.version, previous=result.serving, canary="rollback", detail=req.reason,
                    figures=req.figures)
        host.save()
        return self.view(), result

    async def _promote_candidate(self, c: Canary, req: CanaryDecisionRequest,
                                 t0: float) -> tuple[CanaryView, SwapResult]:
        """The candidate did better: it serves the alias now."""
        host = self._host
        previous = host.serving
        self.running = None  # this decision ends it (not the flip's generic "end" event)
        try:
            result = await host.promote_locked(req.version, t0)
        except BaseException:
            self.running = c
            raise
        host.record("canary", req.version, previous=previous, canary="promote", detail=req.reason,
                    figures={**_routed(c), **req.figures})
        host.save()
        return self.view(), result

    # ---- ends ---------------------------------------------------------------------------------
    def end_on_flip(self, action: str, serving: str) -> None:
        """The alias was just flipped (by `action`) to `serving`: a running canary ends; its candidate is drained
        unless it is the version that serves now."""
        c = self.running
        if c is None:
            return
        if c.version == serving:
            self.running = None
            self._host.record("canary", c.version, canary="end", detail=f"the candidate now serves ({action})",
                              figures=_routed(c))
        else:
            self._drop(c, "end", f"the alias was flipped by {action} to {serving}", None)

    def _drop(self, c: Canary, what: str, reason: str, figures: Optional[Figures]) -> None:
        host = self._host
        self.running = None
        host.record("canary", c.version, previous=host.serving, canary=what, detail=reason,
                    figures={**_routed(c), **(figures or {})})
        host.save()
        if c.version != host.serving:
            host.drain_later(c.version)

    # ---- restart ------------------------------------------------------------------------------
    async def resume(self, c: Canary) -> None:
        """Resume `c`, the canary that ran when `registry.json` was written: re-load its candidate, keep its start
        time and counts (the trainer's watch goes on judging the same window). One that cannot go on (its
        version gone or now serving, its adapter not loadable on this base) ends with a `canary` `end` event.
        The caller (the registry's start) holds the lock."""
        host = self._host
        why = await self._why_not_resumed(c)
        if why is not None:
            log.error("not resuming the canary of %s after the restart: %s", c.version, why)
            host.record("canary", c.version, previous=host.serving, canary="end",
                        detail=f"not resumed after the restart: {why}", figures=_routed(c))
            return
        self.running = c
        host.record("canary", c.version, previous=host.serving, canary="resume",
                    detail=f"resumed after the restart: {c.fraction:.0%} of {host.alias!r} traffic to {c.version} "
                    f"(serving {host.serving})", figures={"fraction": c.fraction, **_routed(c)})

    async def _why_not_resumed(self, c: Canary) -> Optional[str]:
        """None when `c`'s candidate is loaded again; else why the canary cannot go on."""
        host = self._host
        v = host.versions.get(c.version)
        if v is None or v.adapter_path is None:
            return "its version is no longer registered as an adapter"
        if v.name == host.serving:
            return "the candidate serves the alias now"
        try:
            await host.ensure_loaded(v, action="restore", detail="canary candidate re-loaded after restart")
        except (UpstreamError, BaseConflictError) as e:
            return f"its adapter could not be re-loaded ({e})"
        return None
