"""The hot-swap core: versions, the alias, in-flight leases, promote / rollback, drain-then-unload.

`Registry` is the gateway's single source of truth for "which version answers the alias". Its whole
interface is:

* `acquire(model) -> Lease | None` resolves the alias (or a version name) and counts one request on that
  version; `Lease.release()` gives it back. `acquire` is synchronous on purpose: with no `await` between
  resolving and counting, a concurrent promote can never unload the version a request was routed to.
* `load(path, name)` registers a new version (vLLM loads it first; a refusal changes nothing here);
  `unload(name)` drains a version that is not in use and unloads its adapter (it stays registered, unloaded:
  names are never reused, and a restart does not load it again); `promote(name)` and `rollback()` flip the
  alias. The flip is one list operation on the event loop, so the next `acquire` sees the new version and no
  request sees half a swap. Admin operations hold one lock, so concurrent promotes / rollbacks / loads /
  unloads run one after the other (an unload holds it only to check and to unload, not while it drains).
* After a flip, the previous version is drained in a background task: it waits (event-driven, no polling)
  until the version's last lease is released (a stream holds its lease until its last byte) and only
  then unloads the adapter from vLLM, so a request never loses its adapter mid-answer. `unload` runs the same
  drain and waits for it.
* `start_canary(name, fraction)` makes `acquire(alias, session)` send that share of the alias's requests to
  a loaded candidate (`_canary`: sticky per session); `stop_canary` ends it, `decide_canary` records an
  automatic decision and acts on it, and any flip of the alias ends a running canary. These delegate to the
  registry's `canary_state` (`_canary_state.CanaryState`), which is saved in `registry.json` with the rest and
  resumed after a restart. It reaches back into the registry through `CanaryHost`: `record` (history),
  `save`, `drain_later`, `ensure_loaded`, and `promote_locked` / `rollback_locked` (the flips, with the admin
  lock already held), which are the registry's interface to its canary part and not for other callers.
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
from ._canary_state import CanaryState
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
        self._drains: set[asyncio.Task[Any]] = set()
        self.started = False
        #: The canary part (`_canary_state`): the running canary and its operations, under this registry's lock.
        self.canary_state = CanaryState(self, self._lock)
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
            await self.canary_state.resume(Canary(**snap.canary.model_dump()))
        self.save()
        self.started = True

    async def _restore_serving(self) -> None:
        # A restart must serve the same version; if its adapter has vanished, fall back down the stack.
        while True:
            v = self.versions[self.stack[-1]]
            if v.state == "loaded":
                return
            try:
                await self.ensure_loaded(v, action="restore", detail="re-loaded after restart")
                return
            except (UpstreamError, BaseConflictError) as e:
                log.error("cannot re-load serving version %s: %s; falling back", v.name, e)
                popped = self.stack.pop()
                self.record("rollback", self.stack[-1], previous=popped, detail=f"restore failed: {e}")

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

    @property
    def canary(self) -> Optional[Canary]:
        """The running canary; None when none runs."""
        return self.canary_state.running

    def acquire(self, model: str, session: Optional[str] = None) -> Optional[Lease]:
        """Resolve `model` (the alias or a loaded version name) and count a request on it; None if unknown.
        While a canary runs, an alias request may go to the candidate (`session`: the X-Looplift-Session
        header, which keeps an episode on one version)."""
        if model == self.alias:
            v = self.canary_state.route(self.versions.get(self.stack[-1]), session)
        else:
            v = self.versions.get(model)
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
                self.record("load", name, detail=f"full checkpoint {adapter} (a vLLM set starts on promote)")
            else:
                # vLLM first: if it refuses, nothing here has changed (and the name is not burnt).
                await self._adapters.load(name, str(adapter))
                v = Version(name=name, adapter_path=str(adapter), created_at=_now(), state="loaded", base=self.base)
                self.record("load", name, detail=str(adapter))
            self.versions[name] = v
            self.save()
            return self._info(v)

    async def unload(self, name: str) -> VersionInfo:
        """Unload the adapter of `name` from vLLM (every replica) once its last request is done, and keep it
        registered as unloaded: its name is never reused, a restart does not load it again, and a promote or
        rollback would. An unloaded version is answered as it is. Raises `VersionNotFoundError`; a 409 for a
        version in use (`_unloadable`); `UpstreamError` when vLLM refuses the unload (it stays loaded)."""
        while True:
            async with self._lock:
                v = self._unloadable(name)
                if v.state != "loaded":
                    return self._info(v)
                drain = self._drain_task(v, "unloaded on request (DELETE /admin/versions): 0 requests in flight")
            # Shielded: a caller that gives up does not cancel the unload it asked for. The drain gives up when
            # the version is promoted or made a canary meanwhile; the next turn then refuses with a 409.
            refused = await asyncio.shield(drain)
            if refused is not None:
                raise refused

    def _unloadable(self, name: str) -> Version:
        """`name`'s version, if it may be unloaded: registered, not serving, an adapter, not the canary's candidate."""
        v = self.versions.get(name)
        if v is None:
            raise VersionNotFoundError(name, list(self.versions))
        if name == self.serving:
            raise _in_use(f"{name!r} serves the alias {self.alias!r}; promote or roll back to another version "
                          "first (the flip drains and unloads it by itself)")
        if v.adapter_path is None:
            raise BaseConflictError(f"{name!r} is a base model (full weights, served by vLLM itself): it has no "
                                    "adapter to unload; only adapter versions can be unloaded")
        if self.canary_state.is_candidate(name):
            raise CanaryError(f"{name!r} is the running canary's candidate; end the canary first (DELETE "
                              "/admin/canary), which drains and unloads it")
        return v

    async def promote(self, name: str) -> SwapResult:
        """Point the alias at `name` (re-loading its adapter if needed); drain and unload the previous one."""
        async with self._lock:
            return await self.promote_locked(name, time.perf_counter())

    async def promote_locked(self, name: str, t0: float) -> SwapResult:
        """`promote` with the admin lock already held (`t0`: when the request came, for `swap_ms`)."""
        v = self.versions.get(name)
        if v is None:
            raise VersionNotFoundError(name, list(self.versions))
        previous = self.serving
        if name == previous:
            return SwapResult(alias=self.alias, serving=name, previous=previous, swap_ms=0.0)
        new = await self._prepare(v)  # a refusal raises here, before anything changed
        self._switch(v, new)
        self.stack.append(name)  # the flip: seen by the very next acquire()
        self.canary_state.end_on_flip("promote", name)
        return self._flipped("promote", name, previous, t0)

    async def rollback(self) -> SwapResult:
        """Serve the previously serving version again; the current one is drained and unloaded."""
        async with self._lock:
            return await self.rollback_locked(time.perf_counter())

    async def rollback_locked(self, t0: float) -> SwapResult:
        """`rollback` with the admin lock already held (`t0`: when the request came, for `swap_ms`)."""
        if len(self.stack) < 2:
            raise NothingToRollBackError(
                f"nothing to roll back to: {self.serving!r} is the only version the alias "
                f"{self.alias!r} has served; promote another version instead."
            )
        target = self.versions[self.stack[-2]]
        new = await self._prepare(target)
        self._switch(target, new)
        previous = self.stack.pop()  # the flip
        self.canary_state.end_on_flip("rollback", target.name)
        return self._flipped("rollback", target.name, previous, t0)

    def _flipped(self, action: HistoryAction, serving: str, previous: str, t0: float) -> SwapResult:
        swap_ms = (time.perf_counter() - t0) * 1000
        self.record(action, serving, previous=previous, detail=f"swap {swap_ms:.1f} ms")
        self.save()
        self.drain_later(previous)
        return SwapResult(alias=self.alias, serving=serving, previous=previous, swap_ms=swap_ms)

    async def _prepare(self, v: Version) -> Optional[list[Any]]:
        """Make `v` ready to serve before a flip: load its adapter, or for a full-weight version that is not the
        base now, start and warm its vLLM set (returned, for `_switch`). Raises with nothing changed."""
        if v.adapter_path is not None or v.name == self.base:
            await self.ensure_loaded(v)
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
        self.record("load", v.name, detail=f"started {len(new)} vLLM(s) on {v.model_dir or 'the first checkpoint'} "
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

    async def ensure_loaded(self, v: Version, action: HistoryAction = "load", detail: Optional[str] = None) -> None:
        """Load `v`'s adapter into vLLM unless it is loaded (recorded as `action`); raises `BaseConflictError` for
        an adapter of another base or a full-weight version, `UpstreamError` when vLLM refuses."""
        if v.state == "loaded":
            return
        if v.adapter_path is None or v.base != self.base:
            raise BaseConflictError(
                f"{v.name!r} is an adapter for {v.base!r}, but vLLM serves {self.base!r} now: promote {v.base!r} "
                f"first, or register the adapter again (POST /admin/versions) to load it on {self.base!r}"
                if v.adapter_path is not None else f"{v.name!r} is a full-weight version that no vLLM set serves")
        await self._adapters.load(v.name, v.adapter_path)
        v.state = "loaded"
        self.record(action, v.name, detail=detail or f"re-loaded {v.adapter_path}")

    def _next_name(self) -> str:
        pat = re.compile(re.escape(self.alias) + r"-v(\d+)$")
        used = [int(m.group(1)) for n in self.versions if (m := pat.match(n))]
        return version_name(self.alias, max(used, default=0) + 1)

    # ---- canary (`_canary_state`) ------------------------------------------------------------
    def canary_view(self) -> CanaryView:
        """The running canary and the recent canary events (for `GET /admin/canary`)."""
        return self.canary_state.view()

    async def start_canary(self, name: str, fraction: float) -> CanaryView:
        """Send `fraction` (0 < f < 1) of alias requests to the loaded version `name` (see `CanaryState.start`)."""
        return await self.canary_state.start(name, fraction)

    async def stop_canary(self, reason: str = "ended by the operator", figures: Optional[Figures] = None) -> CanaryView:
        """End the running canary (its candidate is drained, then unloaded); `CanaryError` when none runs."""
        return await self.canary_state.stop(reason, figures)

    async def decide_canary(self, req: CanaryDecisionRequest) -> tuple[CanaryView, Optional[SwapResult]]:
        """Record an automatic decision and act on it (see `CanaryState.decide`)."""
        return await self.canary_state.decide(req)

    # ---- drain ----------------------------------------------------------------------------
    def drain_later(self, name: str) -> None:
        """Unload `name` in the background once its last request is done (never the base model)."""
        if self.versions[name].adapter_path is None:
            return  # the base model is part of vLLM itself and stays loaded
        self._drain_task(self.versions[name], "drained: 0 requests in flight")

    def _drain_task(self, v: Version, detail: str) -> asyncio.Task[Optional[UpstreamError]]:
        task = asyncio.get_running_loop().create_task(self._drain(v, detail), name=f"drain-{v.name}")
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)
        return task

    async def _drain(self, v: Version, detail: str) -> Optional[UpstreamError]:
        """Wait for `v`'s last request, then unload it (recorded with `detail`); returns vLLM's refusal, which
        leaves it loaded (a background drain only logs it), else None."""
        while True:
            await v.idle.wait()
            async with self._lock:
                if v.name == self.serving or v.state != "loaded" or self.canary_state.is_candidate(v.name):
                    return None  # promoted again, made a canary (or already unloaded) while draining
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
                        return e
                self.record("unload", v.name, detail=detail)
                self.save()
                return None

    # ---- persistence ----------------------------------------------------------------------
    def record(self, action: HistoryAction, version: str, previous: Optional[str] = None,
               detail: Optional[str] = None, canary: Optional[str] = None, figures: Optional[Figures] = None) -> None:
        """Append an event to the audit history (the newest `_HISTORY_MAX` are kept)."""
        self.history.append(HistoryEvent(at=_now(), action=action, version=version, previous=previous, detail=detail,
                                         canary=canary, figures=figures))
        del self.history[:-_HISTORY_MAX]

    def _restore(self, snap: Optional[Snapshot]) -> None:
        base = self.settings.base_version
        self.versions = {base: Version(name=base, adapter_path=None, created_at=_now(), state="loaded")}
        self.stack, self.history, self.base = [base], [], base
        self.canary_state.reset()
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

    def save(self) -> None:
        """Write `registry.json`: versions, the serving stack, the history and the running canary."""
        self._file.write(self.serving, Snapshot(
            versions=[StoredVersion(v.name, v.adapter_path, v.created_at, v.state, v.model_dir, v.base)
                      for v in self.versions.values()],
            stack=list(self.stack), history=self.history,
            canary=self.canary_state.info(),
        ))


def _in_use(message: str) -> ServerError:
    """The 409 (`version_in_use`) for unloading the serving version. errors.py has no class for it yet, so it is a
    `ServerError` carrying the status and code such a class would: the wire answer will not change when one comes."""
    e = ServerError(message)
    e.http_status, e.code = 409, "version_in_use"
    return e


def _same_path(a: Optional[str], b: Optional[str]) -> bool:
    if a is None or b is None:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)
