"""The hot-swap core: versions, the alias, in-flight leases, promote / rollback, drain-then-unload.

`Registry` is the gateway's single source of truth for "which version answers the alias". Its whole
interface is:

* `acquire(model) -> Lease | None` resolves the alias (or a version name) and counts one request on that
  version; `Lease.release()` gives it back. `acquire` is synchronous on purpose: with no `await` between
  resolving and counting, a concurrent promote can never unload the version a request was routed to.
* `load(path, name)` registers a new version (vLLM loads it first; a refusal changes nothing here);
  `promote(name)` and `rollback()` flip the alias. The flip is one list operation on the event loop, so
  the next `acquire` sees the new version and no request sees half a swap. Admin operations hold one
  lock, so concurrent promotes / rollbacks / loads run one after the other.
* After a flip, the previous version is drained in a background task: it waits (event-driven, no polling)
  until the version's last lease is released (a stream holds its lease until its last byte) and only
  then unloads the adapter from vLLM, so a request never loses its adapter mid-answer.
* `start_canary(name, fraction)` makes `acquire(alias, session)` send that share of the alias's requests to
  a loaded candidate (`_canary`: sticky per session); `decide_canary` records an automatic decision with its
  figures and acts on it (promote the candidate, drop it, or roll back a watched promotion); any flip of
  the alias ends a running canary. Canary starts, decisions and ends are `canary` history events. The running
  canary is saved in `registry.json` and resumed after a restart (its candidate re-loaded); if that fails, an
  `end` event says why.
* Full-weight versions (a whole checkpoint, `model_dir`; `load` tells the kinds apart by the directory) are
  served blue/green by a `BaseControl` (the local replica set): promoting one (or rolling back to one) starts
  and warms a new vLLM set on it while the old set serves, then flips the alias and the routing in one
  synchronous step; the old set is stopped once its last request is done. A failed start changes nothing.
  Adapters belong to the base they were loaded on (`Version.base`): a base change unloads them, and flipping
  to one whose base is not the serving one is refused (`BaseConflictError`: register it again), as is a
  canary of a full version (both would need two vLLM sets serving the alias at once).
* `ready()` starts the registry once: reads `registry.json` (`_registry_file`), reconciles it with what
  vLLM has loaded (leftover adapters are unloaded, the serving version is re-loaded, falling back down the
  serving stack if its adapter is gone), and can be retried while vLLM is not answering yet.

vLLM is reached only through the `AdapterControl` protocol (three calls), so tests drive the registry with
an in-memory implementation and no HTTP at all; `_upstream.Upstream` is the HTTP implementation. A set of
replicas would implement the same protocol by fanning each call out.

Deliberately not here: HTTP input validation, metrics (the gateway reads `in_flight()` at scrape time),
starting vLLM. It is not thread-safe: use it from one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Coroutine, Optional, Protocol, runtime_checkable

from ._canary import Canary
from ._models import (
    CanaryDecisionRequest,
    CanaryView,
    Figures,
    HistoryAction,
    HistoryEvent,
    SwapResult,
    VersionInfo,
    VersionState,
    VersionsView,
)
from ._registry_file import RegistryFile, Snapshot, StoredVersion
from ._settings import GatewaySettings, valid_name, version_name
from ._validate import validate_adapter, validate_checkpoint, version_kind
from .errors import (
    BaseConflictError,
    CanaryError,
    InvalidNameError,
    NothingToRollBackError,
    ServerError,
    UpstreamError,
    VersionExistsError,
    VLLMStartError,
    VersionNotFoundError,
)

log = logging.getLogger("looplift.server.registry")

_HISTORY_MAX = 1000
#: Canary events `GET /admin/canary` returns.
_CANARY_EVENTS = 50


class AdapterControl(Protocol):
    """What the registry needs from vLLM (or from several replicas behind one name)."""

    async def load(self, name: str, path: str) -> None:
        """Load the adapter at `path` as `name`; raise `UpstreamError` if refused or unreachable."""

    async def unload(self, name: str) -> None:
        """Unload `name`; raise `UpstreamError` (with `status=404` when it was not loaded)."""

    async def models(self) -> dict[str, Optional[str]]:
        """What is served now: {model id: adapter path}, the path None for base models."""


@runtime_checkable
class BaseControl(Protocol):
    """What full-weight versions need besides `AdapterControl`: vLLM sets to start and switch (`ReplicaSet`)."""

    async def start_base(self, name: str, model_dir: Optional[str]) -> list[Any]:
        """Start and warm a set serving `model_dir` (None: the first checkpoint) as `name`, not routed to yet."""

    def flip_base(self, name: str, new: list[Any]) -> Coroutine[Any, Any, None]:
        """Route new requests to `new` now; returns the coroutine that drains and stops the old set."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(eq=False)
class Version:
    """Runtime record of one version."""

    name: str
    #: None for the base model, which vLLM serves itself and which is never unloaded.
    adapter_path: Optional[str]
    created_at: datetime
    state: VersionState
    in_flight: int = 0
    #: Set while `in_flight == 0`; the drain task waits on it.
    idle: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    #: A full-weight version's checkpoint directory (None for adapters and the base).
    model_dir: Optional[str] = None
    #: An adapter's base: the version vLLM served as its base model when the adapter was loaded.
    base: Optional[str] = None

    def __post_init__(self) -> None:
        self.idle.set()


class Lease:
    """One request's hold on a version; `release()` is idempotent so every exit path may call it."""

    __slots__ = ("version", "_v", "_released")

    def __init__(self, v: Version) -> None:
        #: The version name vLLM must be asked for.
        self.version = v.name
        self._v = v
        self._released = False

    def release(self) -> None:
        """Give the hold back (safe to call more than once)."""
        if not self._released:
            self._released = True
            v = self._v
            v.in_flight -= 1
            if v.in_flight == 0:
                v.idle.set()


class Registry:
    """Versions + alias over one vLLM (see the module docstring). `await ready()` before use."""

    def __init__(self, settings: GatewaySettings, adapters: AdapterControl) -> None:
        self.settings = settings
        self.alias = settings.alias
        self._adapters = adapters
        self._file = RegistryFile(settings.registry_path, settings.alias)
        self.versions: dict[str, Version] = {}
        #: Serving history as a stack: the top is serving; rollback pops it.
        self.stack: list[str] = []
        self.history: list[HistoryEvent] = []
        self._lock = asyncio.Lock()
        self._drains: set[asyncio.Task[None]] = set()
        self.started = False
        #: The running canary (saved with the rest; `_resume_canary` picks it up after a restart).
        self.canary: Optional[Canary] = None
        #: The version vLLM serves as its base model now: the base (version 0) or a full-weight version.
        self.base = settings.base_version

    # ---- lifecycle ------------------------------------------------------------------------
    async def ready(self) -> "Registry":
        """Start once (see `start`); cheap when started. Raises `UpstreamError` while vLLM cannot be reached,
        and the next call tries again."""
        if not self.started:
            async with self._lock:
                if not self.started:
                    await self._start()
        return self

    async def start(self) -> None:
        """Read `registry.json`, reconcile with vLLM's loaded adapters, and re-load the serving version."""
        async with self._lock:
            await self._start()

    async def _start(self) -> None:
        snap = self._file.read()
        self._restore(snap)
        served = await self._adapters.models()
        base = self.settings.base_version
        if base not in served or served[base] is not None:
            raise UpstreamError(
                f"vLLM does not serve the base model as {base!r} (it serves {sorted(served)}); "
                f"start vLLM with --served-model-name {base}"
            )
        # The gateway owns the adapter namespace of its vLLM: anything loaded there that the registry does
        # not know (or knows under another path) is a leftover and is unloaded, so names can be reused safely.
        for vid, root in served.items():
            if root is not None:
                v = self.versions.get(vid)
                if v is None or not _same_path(v.adapter_path, root):
                    await self._adapters.unload(vid)
        for v in self.versions.values():
            if v.adapter_path is not None:
                root = served.get(v.name)
                v.state = "loaded" if root is not None and _same_path(v.adapter_path, root) else "unloaded"
        await self._restore_serving()
        if snap is not None and snap.canary is not None:
            await self._resume_canary(Canary(**snap.canary.model_dump()))
        self._save()
        self.started = True

    async def _restore_serving(self) -> None:
        # A restart must serve the same version; if its adapter has vanished, fall back down the stack.
        while True:
            v = self.versions[self.stack[-1]]
            if v.state == "loaded":
                return
            try:
                await self._ensure_loaded(v, action="restore", detail="re-loaded after restart")
                return
            except (UpstreamError, BaseConflictError) as e:
                log.error("cannot re-load serving version %s: %s; falling back", v.name, e)
                popped = self.stack.pop()
                self._event("rollback", self.stack[-1], previous=popped, detail=f"restore failed: {e}")

    async def _resume_canary(self, c: Canary) -> None:
        """Resume `c`, the canary that ran when `registry.json` was written: re-load its candidate, keep its start
        time and counts (the trainer's watch goes on judging the same window). One that cannot go on (its
        version gone or now serving, its adapter not loadable on this base) ends with a `canary` `end` event."""
        v = self.versions.get(c.version)
        why = None
        if v is None or v.adapter_path is None:
            why = "its version is no longer registered as an adapter"
        elif v.name == self.serving:
            why = "the candidate serves the alias now"
        else:
            try:
                await self._ensure_loaded(v, action="restore", detail="canary candidate re-loaded after restart")
            except (UpstreamError, BaseConflictError) as e:
                why = f"its adapter could not be re-loaded ({e})"
        figures: Figures = {"routed_candidate": c.routed_candidate, "routed_serving": c.routed_serving}
        if why is not None:
            log.error("not resuming the canary of %s after the restart: %s", c.version, why)
            self._event("canary", c.version, previous=self.serving, canary="end",
                        detail=f"not resumed after the restart: {why}", figures=figures)
            return
        self.canary = c
        self._event("canary", c.version, previous=self.serving, canary="resume",
                    detail=f"resumed after the restart: {c.fraction:.0%} of {self.alias!r} traffic to {c.version} "
                    f"(serving {self.serving})", figures={"fraction": c.fraction, **figures})

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

    # ---- requests (the hot path: no awaits) ------------------------------------------------
    @property
    def serving(self) -> str:
        """The version the alias points at."""
        return self.stack[-1]

    def acquire(self, model: str, session: Optional[str] = None) -> Optional[Lease]:
        """Resolve `model` (the alias or a loaded version name) and count a request on it; None if unknown.
        While a canary runs, an alias request may go to the candidate (`session`: the X-Looplift-Session
        header, which keeps an episode on one version)."""
        v = self.versions.get(self.stack[-1] if model == self.alias else model)
        c = self.canary
        if c is not None and model == self.alias and c.takes(session):
            candidate = self.versions.get(c.version)
            if candidate is not None and candidate.state == "loaded":  # else the serving version answers
                v = candidate
        if v is None or v.state != "loaded":
            return None
        v.in_flight += 1
        if v.in_flight == 1:
            v.idle.clear()
        return Lease(v)

    def model_ids(self) -> list[str]:
        """The alias and every loaded version, for `/v1/models`."""
        return [self.alias] + [v.name for v in self.versions.values() if v.state == "loaded"]

    def resolve(self, model_id: str) -> Version:
        """The version `model_id` (an id from `model_ids()`) answers with."""
        return self.versions[self.serving if model_id == self.alias else model_id]

    def in_flight(self) -> dict[str, int]:
        """Requests in flight per version (every loaded version, and any version still answering)."""
        return {v.name: v.in_flight for v in self.versions.values() if v.state == "loaded" or v.in_flight}

    # ---- admin ----------------------------------------------------------------------------
    def view(self) -> VersionsView:
        """A snapshot of the registry for the admin API."""
        return VersionsView(alias=self.alias, serving=self.serving,
                            versions=[self._info(v) for v in self.versions.values()], history=list(self.history))

    def _info(self, v: Version) -> VersionInfo:
        return VersionInfo(name=v.name, adapter_path=v.adapter_path, state=v.state, created_at=v.created_at,
                           in_flight=v.in_flight, serving=v.name == self.serving, model_dir=v.model_dir, base=v.base)

    async def load(self, path: str, name: Optional[str] = None) -> VersionInfo:
        """Validate an adapter directory, load it into vLLM as a new version, register it (not promoted); a full
        checkpoint directory is validated and registered only (its vLLM set starts when it is promoted)."""
        full = version_kind(path) == "full"
        adapter = validate_checkpoint(path) if full else validate_adapter(path, self.settings.max_lora_rank)
        if full and not isinstance(self._adapters, BaseControl):
            raise BaseConflictError("full-weight versions need a gateway over vLLM replicas it started itself "
                                    "(`looplift server start --model DIR --replicas N`); this one has one upstream")
        async with self._lock:
            if name is not None:
                if not valid_name(name):
                    raise InvalidNameError(name)
                if name in self.versions or name == self.alias:
                    raise VersionExistsError(name)
            else:
                name = self._next_name()
            if full:
                v = Version(name=name, adapter_path=None, created_at=_now(), state="unloaded", model_dir=str(adapter))
                self._event("load", name, detail=f"full checkpoint {adapter} (a vLLM set starts on promote)")
            else:
                # vLLM first: if it refuses, nothing here has changed (and the name is not burnt).
                await self._adapters.load(name, str(adapter))
                v = Version(name=name, adapter_path=str(adapter), created_at=_now(), state="loaded", base=self.base)
                self._event("load", name, detail=str(adapter))
            self.versions[name] = v
            self._save()
            return self._info(v)

    async def promote(self, name: str) -> SwapResult:
        """Point the alias at `name` (re-loading its adapter if needed); drain and unload the previous one."""
        async with self._lock:
            return await self._promote(name, time.perf_counter())

    async def _promote(self, name: str, t0: float) -> SwapResult:
        v = self.versions.get(name)
        if v is None:
            raise VersionNotFoundError(name, list(self.versions))
        previous = self.serving
        if name == previous:
            return SwapResult(alias=self.alias, serving=name, previous=previous, swap_ms=0.0)
        new = await self._prepare(v)  # a refusal raises here, before anything changed
        self._switch(v, new)
        self.stack.append(name)  # the flip: seen by the very next acquire()
        self._end_canary_on_flip("promote", name)
        return self._flipped("promote", name, previous, t0)

    async def rollback(self) -> SwapResult:
        """Serve the previously serving version again; the current one is drained and unloaded."""
        async with self._lock:
            return await self._rollback(time.perf_counter())

    async def _rollback(self, t0: float) -> SwapResult:
        if len(self.stack) < 2:
            raise NothingToRollBackError(
                f"nothing to roll back to: {self.serving!r} is the only version the alias "
                f"{self.alias!r} has served; promote another version instead."
            )
        target = self.versions[self.stack[-2]]
        new = await self._prepare(target)
        self._switch(target, new)
        previous = self.stack.pop()  # the flip
        self._end_canary_on_flip("rollback", target.name)
        return self._flipped("rollback", target.name, previous, t0)

    def _flipped(self, action: HistoryAction, serving: str, previous: str, t0: float) -> SwapResult:
        swap_ms = (time.perf_counter() - t0) * 1000
        self._event(action, serving, previous=previous, detail=f"swap {swap_ms:.1f} ms")
        self._save()
        self._schedule_drain(previous)
        return SwapResult(alias=self.alias, serving=serving, previous=previous, swap_ms=swap_ms)

    async def _prepare(self, v: Version) -> Optional[list[Any]]:
        """Make `v` ready to serve before a flip: load its adapter, or for a full-weight version that is not the
        base now, start and warm its vLLM set (returned, for `_switch`). Raises with nothing changed."""
        if v.adapter_path is not None or v.name == self.base:
            await self._ensure_loaded(v)
            return None
        control = self._adapters
        if not isinstance(control, BaseControl):
            raise BaseConflictError(f"{v.name!r} is a full-weight version; this gateway cannot start vLLM sets")
        t0 = time.perf_counter()
        try:
            new = await control.start_base(v.name, v.model_dir)
        except BaseConflictError:
            raise
        except ServerError as e:
            first = (e.message.strip().splitlines() or [type(e).__name__])[0]
            where = f" (log: {e.log_path})" if isinstance(e, VLLMStartError) else ""
            raise UpstreamError(f"starting vLLM for {v.name} failed: {first}{where}; {self.serving} keeps serving"
                                ) from None
        self._event("load", v.name, detail=f"started {len(new)} vLLM(s) on {v.model_dir or 'the first checkpoint'} "
                    f"in {time.perf_counter() - t0:.1f} s")
        return new

    def _switch(self, v: Version, new: Optional[list[Any]]) -> None:
        """With `new` (from `_prepare`), route to that set now (no await: same step as the alias flip); the
        adapters of the old base are gone with it, and the old set is drained, then stopped, in the background."""
        if new is None:
            return
        assert isinstance(self._adapters, BaseControl)
        retire = self._adapters.flip_base(v.name, new)
        for other in self.versions.values():
            other.state = "loaded" if other is v else "unloaded"
        self.base = v.name
        task = asyncio.get_running_loop().create_task(retire, name=f"retire-set-before-{v.name}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _ensure_loaded(self, v: Version, action: HistoryAction = "load", detail: Optional[str] = None) -> None:
        if v.state == "loaded":
            return
        if v.adapter_path is None or v.base != self.base:
            raise BaseConflictError(
                f"{v.name!r} is an adapter for {v.base!r}, but vLLM serves {self.base!r} now: promote {v.base!r} "
                f"first, or register the adapter again (POST /admin/versions) to load it on {self.base!r}"
                if v.adapter_path is not None else f"{v.name!r} is a full-weight version that no vLLM set serves")
        await self._adapters.load(v.name, v.adapter_path)
        v.state = "loaded"
        self._event(action, v.name, detail=detail or f"re-loaded {v.adapter_path}")

    def _next_name(self) -> str:
        pat = re.compile(re.escape(self.alias) + r"-v(\d+)$")
        used = [int(m.group(1)) for n in self.versions if (m := pat.match(n))]
        return version_name(self.alias, max(used, default=0) + 1)

    # ---- canary ---------------------------------------------------------------------------
    def canary_view(self) -> CanaryView:
        """The running canary and the recent canary events (for `GET /admin/canary`)."""
        events = [h for h in self.history if h.action == "canary"][-_CANARY_EVENTS:]
        return CanaryView(alias=self.alias, serving=self.serving,
                          canary=self.canary.info() if self.canary else None, decisions=events)

    async def start_canary(self, name: str, fraction: float) -> CanaryView:
        """Send `fraction` (0 < f < 1) of alias requests to the loaded version `name`; a running canary of the
        same version only changes its fraction. Raises `VersionNotFoundError` or `CanaryError` (with the fix)."""
        if not 0.0 < fraction < 1.0:
            raise CanaryError(f"fraction must be strictly between 0 and 1, got {fraction}", http_status=400)
        async with self._lock:
            v = self.versions.get(name)
            if v is None:
                raise VersionNotFoundError(name, list(self.versions))
            if name == self.serving:
                raise CanaryError(f"{name!r} already serves the alias {self.alias!r}; a canary needs another "
                                  "version (load one with POST /admin/versions)", http_status=400)
            if v.adapter_path is None:
                raise CanaryError(f"{name!r} is a full-weight version: a canary shares one vLLM set; promote it "
                                  "(blue/green) and roll back if it does worse", http_status=409)
            if v.state != "loaded":
                raise CanaryError(f"{name!r} is not loaded in vLLM; load it first (POST /admin/versions, or "
                                  "`looplift server load`) and start the canary again", http_status=400)
            c = self.canary
            if c is not None and c.version != name:
                raise CanaryError(f"a canary of {c.version!r} is running; end it first (DELETE /admin/canary)")
            if c is not None:
                c.fraction = fraction
            else:
                self.canary = Canary(version=name, fraction=fraction, started_at=_now())
            self._event("canary", name, previous=self.serving, canary="start",
                        detail=f"{fraction:.0%} of {self.alias!r} traffic to {name} (serving {self.serving})",
                        figures={"fraction": fraction})
            self._save()
            return self.canary_view()

    async def stop_canary(self, reason: str = "ended by the operator", figures: Optional[Figures] = None) -> CanaryView:
        """End the running canary (its candidate is drained, then unloaded); `CanaryError` when none runs."""
        async with self._lock:
            c = self.canary
            if c is None:
                raise CanaryError("no canary is running; start one with POST /admin/canary", http_status=404)
            self._drop_canary(c, "drop", reason, figures)
            return self.canary_view()

    async def decide_canary(self, req: CanaryDecisionRequest) -> tuple[CanaryView, Optional[SwapResult]]:
        """Record an automatic decision with its figures and act on it (see `CanaryDecisionRequest`); returns the
        canary view after it, and the alias flip it made (None for a drop)."""
        t0 = time.perf_counter()
        async with self._lock:
            if req.decision == "rollback":
                if self.serving != req.version or len(self.stack) < 2:
                    raise CanaryError(f"the alias serves {self.serving!r}, not a rollback-able {req.version!r}: this "
                                      "decision is stale (the state changed since it was made)")
                result = await self._rollback(t0)  # a refusal raises before anything is recorded
                self._event("canary", req.version, previous=result.serving, canary="rollback", detail=req.reason,
                            figures=req.figures)
                self._save()
                return self.canary_view(), result
            c = self.canary
            if c is None or c.version != req.version:
                running = f"the running canary is {c.version!r}" if c else "no canary is running"
                raise CanaryError(f"cannot {req.decision} {req.version!r}: {running}")
            if req.decision == "drop":
                self._drop_canary(c, "drop", req.reason, req.figures)
                return self.canary_view(), None
            previous = self.serving
            self.canary = None  # this decision ends it (not the flip's generic "end" event)
            try:
                result = await self._promote(req.version, t0)
            except BaseException:
                self.canary = c
                raise
            self._event("canary", req.version, previous=previous, canary="promote", detail=req.reason,
                        figures={"routed_candidate": c.routed_candidate, "routed_serving": c.routed_serving,
                                 **req.figures})
            self._save()
            return self.canary_view(), result

    def _drop_canary(self, c: Canary, what: str, reason: str, figures: Optional[Figures]) -> None:
        self.canary = None
        routed = {"routed_candidate": c.routed_candidate, "routed_serving": c.routed_serving}
        self._event("canary", c.version, previous=self.serving, canary=what, detail=reason,
                    figures={**routed, **(figures or {})})
        self._save()
        if c.version != self.serving:
            self._schedule_drain(c.version)

    def _end_canary_on_flip(self, action: str, serving: str) -> None:
        c = self.canary
        if c is None:
            return
        if c.version == serving:
            self.canary = None
            self._event("canary", c.version, canary="end", detail=f"the candidate now serves ({action})",
                        figures={"routed_candidate": c.routed_candidate, "routed_serving": c.routed_serving})
        else:
            self._drop_canary(c, "end", f"the alias was flipped by {action} to {serving}", None)

    # ---- drain ----------------------------------------------------------------------------
    def _schedule_drain(self, name: str) -> None:
        if self.versions[name].adapter_path is None:
            return  # the base model is part of vLLM itself and stays loaded
        task = asyncio.get_running_loop().create_task(self._drain(self.versions[name]), name=f"drain-{name}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, v: Version) -> None:
        while True:
            await v.idle.wait()
            async with self._lock:
                if v.name == self.serving or v.state != "loaded" or (self.canary and self.canary.version == v.name):
                    return  # promoted again, made a canary (or already unloaded) while draining
                if v.in_flight:
                    continue  # a request by version name came in between the wake-up and the lock
                # Marked before the await so that no new request is routed to it mid-unload.
                v.state = "unloaded"
                try:
                    await self._adapters.unload(v.name)
                except UpstreamError as e:
                    if e.status != 404:  # 404: vLLM already dropped it, which is the goal
                        v.state = "loaded"
                        log.error("unloading %s failed: %s", v.name, e)
                        return
                self._event("unload", v.name, detail="drained: 0 requests in flight")
                self._save()
                return

    # ---- persistence ----------------------------------------------------------------------
    def _event(self, action: HistoryAction, version: str, previous: Optional[str] = None,
               detail: Optional[str] = None, canary: Optional[str] = None, figures: Optional[Figures] = None) -> None:
        self.history.append(HistoryEvent(at=_now(), action=action, version=version, previous=previous, detail=detail,
                                         canary=canary, figures=figures))
        del self.history[:-_HISTORY_MAX]

    def _restore(self, snap: Optional[Snapshot]) -> None:
        base = self.settings.base_version
        self.versions = {base: Version(name=base, adapter_path=None, created_at=_now(), state="loaded")}
        self.stack, self.history, self.base = [base], [], base
        self.canary = None
        if snap is None:
            return
        for sv in snap.versions:
            self.versions[sv.name] = Version(name=sv.name, adapter_path=sv.adapter_path, created_at=sv.created_at,
                                             state="unloaded", model_dir=sv.model_dir,
                                             base=sv.base or (base if sv.adapter_path else None))
        self.versions[base].state = "loaded"
        stack = [n for n in snap.stack if n in self.versions]
        self.stack = stack if stack and stack[0] == base else [base] + stack
        self.history = list(snap.history)

    def _save(self) -> None:
        self._file.write(self.serving, Snapshot(
            versions=[StoredVersion(v.name, v.adapter_path, v.created_at, v.state, v.model_dir, v.base)
                      for v in self.versions.values()],
            stack=list(self.stack), history=self.history,
            canary=self.canary.info() if self.canary else None,
        ))


def _same_path(a: Optional[str], b: Optional[str]) -> bool:
    if a is None or b is None:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)
