"""Several vLLM servers behind one gateway: which replica answers, which are healthy, adapters on all of them.

`ReplicaSet` is the registry's `AdapterControl` when the gateway has more than one upstream, and the proxy's
router. The single-upstream gateway does not use it at all (one `Upstream`, no per-request routing work).

* Routing (`pick`): least outstanding requests among healthy replicas, ties spread round-robin; a request
  with `X-Looplift-Session` goes to the replica that session used last while that replica is healthy, so a
  multi-turn episode keeps hitting vLLM's prefix cache there. The session table is bounded (LRU).
* Health: a replica is taken out at once when a request to it fails at the transport (connection refused or
  broken off) and by the watcher, which asks every replica's `/health` each `replica_health_interval_s`. A local
  replica (`LocalReplica`, a vLLM this process started) whose process exited is restarted in a worker
  thread. A replica (local or remote) that answers again rejoins only after `_sync`: leftover adapters are
  unloaded and every version the registry has loaded, the serving one included, is loaded on it.
* Adapters on every replica, atomically (`load`): loaded on every healthy replica at once; if any replica
  refuses, it is unloaded from those that took it and the error is raised, so the registry changes nothing
  and the alias keeps serving the old version. A replica that is unreachable during a load is taken out
  instead (it catches up when it rejoins). `_wanted` is the set every healthy replica must serve; admin
  calls and rejoins hold one lock, so a rejoin never misses a version loaded meanwhile.
* Retries live in the proxy (`_proxy.RoutedProxy`): a request that failed before a byte went back is
  sent to another replica; a stream cut mid-way ends with an SSE error event naming the replica.

* Blue/green (full-weight versions, driven by the registry): `start_base` starts and warms a second set of
  local vLLMs (same count, same flags) on another checkpoint while the current set keeps serving; `flip_base`
  routes every new request to it in one synchronous step and returns the coroutine that waits until the old
  replicas have no request in flight (polled every 50 ms) and stops them. Adapters are not carried over.

Deliberately not here: vLLM's own data parallelism and external routers (vllm-router, llm-d) -- those are
one upstream to the gateway; weighted or cache-aware routing beyond session affinity; cross-replica
queueing (vLLM queues per replica).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Coroutine, Optional, Sequence, Union

from . import _defaults as D
from ._models import ReplicaInfo
from ._registry import _same_path
from ._settings import GatewaySettings
from ._upstream import Upstream
from ._vllm import VLLMConfig, VLLMServer, replica_env, start_vllm
from .errors import BaseConflictError, UpstreamError

log = logging.getLogger("looplift.server.replicas")

#: Adapter path reported by `models()` for an id some replicas serve and others do not (or from another
#: path): it matches no version, so the registry unloads it everywhere and re-loads what it serves.
PARTIAL = "(not on every replica)"


class _Cancelled(Exception):
    pass


class LocalReplica:
    """A vLLM this process started, that the replica set may restart (same port, same log, same config).

    `stop()` (idempotent) stops it for good, a restart in progress included."""

    def __init__(self, config: VLLMConfig, server: VLLMServer) -> None:
        # Same port (the gateway knows it by URL); warmed up, so the first requests after the rejoin are not slow.
        self.config = replace(config, port=server.port, warm_up=True)
        self.server = server
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """Base URL without `/v1`."""
        return self.server.url

    @property
    def pid(self) -> int:
        """The vLLM API server's pid (its process group id)."""
        return self.server.process.pid

    @property
    def alive(self) -> bool:
        """Whether the current process runs."""
        return self.server.alive

    def restart(self, cancelled: Callable[[], bool] = lambda: False) -> None:
        """Stop what is left of the old process group and start vLLM again; blocks until healthy (call it
        from a worker thread). Raises `VLLMStartError`, or `_Cancelled` when stopped meanwhile."""
        self.server.stop()

        def progress(_s: float, _line: str) -> None:
            if self._stopped or cancelled():
                raise _Cancelled("stopped while restarting")

        new = start_vllm(self.config, progress=progress)
        with self._lock:
            if self._stopped:
                new.stop()
                raise _Cancelled("stopped while restarting")
            self.server = new

    def stop(self) -> None:
        """Stop the process group for good."""
        with self._lock:
            self._stopped = True
            server = self.server
        server.stop()


def start_local_replicas(config: VLLMConfig, count: int,
                         progress: Optional[Callable[[float, str], None]] = None, *, first: int = 0,
                         total: Optional[int] = None) -> list[LocalReplica]:
    """Start `count` vLLMs from `config`, one after the other (on a small machine two loading at once take as
    long, and an interruption then always finds every started one listed for stopping), each on its own share
    of the machine (`replica_env`), replica i > 1 logging to `<log>-<i>`. On any failure or signal, those
    started are stopped before the error propagates. Replica i takes share `first + i` of `total` (default: i of
    `count`); blue/green starts a set on the half of the machine the serving set does not use."""
    started: list[LocalReplica] = []
    try:
        for i in range(count):
            log = config.log_path
            if log is not None and i > 0:
                log = log.with_name(f"{log.stem}-{i + 1}{log.suffix}")
            cfg = replace(config, log_path=log, env={**config.env, **replica_env(first + i, total or count)})
            started.append(LocalReplica(cfg, start_vllm(cfg, progress=progress)))
    except BaseException:
        for r in started:
            r.stop()
        raise
    return started


Source = Union[str, LocalReplica]


@dataclass(eq=False)
class Replica:
    """One upstream vLLM as the set sees it."""

    url: str
    upstream: Upstream
    local: Optional[LocalReplica] = None
    #: Receives requests (serves every wanted adapter).
    healthy: bool = False
    #: Requests being answered by it now (the routing key).
    in_flight: int = 0
    #: What it serves as last seen: {model id: adapter path (None: the base model)}.
    versions: dict[str, Optional[str]] = field(default_factory=dict)
    #: Why it is out (None while healthy).
    detail: Optional[str] = "not checked yet"
    restarts: int = 0
    restarting: bool = False

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(url=self.url, pid=self.local.pid if self.local is not None else None, healthy=self.healthy,
                           in_flight=self.in_flight, versions=sorted(self.versions), detail=self.detail,
                           restarts=self.restarts)


class ReplicaSet:
    """Replicas behind one gateway (see the module docstring). Use from the gateway's event loop."""

    def __init__(self, settings: GatewaySettings, sources: Sequence[Source]) -> None:
        if not sources:
            raise ValueError("a replica set needs at least one upstream")
        self.settings = settings
        self.replicas = [self._replica(s) for s in sources]
        #: Healthy replicas, in configuration order (what `pick` chooses from).
        self._up: list[Replica] = []
        #: {version name: adapter path} every healthy replica serves (the registry's loaded adapters).
        self._wanted: dict[str, str] = {}
        self._affinity: OrderedDict[str, Replica] = OrderedDict()
        self._turn = 0
        self._lock = asyncio.Lock()
        self._reconciled = False
        self._closing = False
        self._watcher: Optional[asyncio.Task[None]] = None
        self._restarts: set[asyncio.Task[None]] = set()
        #: The name the replicas serve their base model under (changes with `flip_base`).
        self.base_name = settings.base_version
        #: Local replicas this set started itself (`start_base`): it stops them when it closes.
        self._owned: set[LocalReplica] = set()
        #: Which half of the machine the latest started set took (the first set: all of it, "0").
        self._half = 0
        #: How the local replicas were first started (flags for every new set; its checkpoint: the base's, a full
        #: version's rollback target).
        self._origin = next((s.config for s in sources if isinstance(s, LocalReplica)), None)

    def _replica(self, source: Source) -> Replica:
        url = source if isinstance(source, str) else source.url
        return Replica(url=url, upstream=Upstream(url, read_timeout_s=self.settings.request_timeout_s),
                       local=None if isinstance(source, str) else source)

    # ---- routing (the hot path: no awaits) ---------------------------------------------------
    def pick(self, session: Optional[str], tried: Sequence[Replica] = ()) -> Optional[Replica]:
        """The replica for the next attempt of a request, or None when no healthy one is left untried."""
        if session is not None:
            r = self._affinity.get(session)
            if r is not None and r.healthy and r not in tried:
                self._affinity.move_to_end(session)
                return r
        up = self._up
        n = len(up)
        best: Optional[Replica] = None
        self._turn += 1
        for i in range(n):  # least outstanding; scanning from a rotating start spreads ties
            r = up[(self._turn + i) % n]
            if r not in tried and (best is None or r.in_flight < best.in_flight):
                best = r
        if best is not None and session is not None:
            self._affinity[session] = best
            self._affinity.move_to_end(session)
            if len(self._affinity) > D.SESSION_AFFINITY_MAX:
                self._affinity.popitem(last=False)
        return best

    def others_up(self, tried: Sequence[Replica]) -> bool:
        """Whether a healthy replica not in `tried` is left."""
        return any(r not in tried for r in self._up)

    def mark_down(self, r: Replica, why: str) -> None:
        """Take `r` out of routing now (it rejoins through the watcher)."""
        r.detail = why
        if r.healthy:
            r.healthy = False
            self._up = [x for x in self._up if x is not r]
            log.warning("replica %s out: %s", r.url, why)

    def _mark_up(self, r: Replica) -> None:
        r.detail = None
        if not r.healthy:
            r.healthy = True
            self._up = [x for x in self.replicas if x.healthy]
            log.info("replica %s in (serves %s)", r.url, ", ".join(sorted(r.versions)))

    def view(self) -> list[ReplicaInfo]:
        """`GET /admin/replicas`."""
        return [r.info() for r in self.replicas]

    def healthy_count(self) -> int:
        """How many replicas receive requests now."""
        return len(self._up)

    # ---- AdapterControl, fanned out ------------------------------------------------------------
    async def load(self, name: str, path: str) -> None:
        """Load on every healthy replica; if one refuses, unload it from the others and raise."""
        async with self._lock:
            if not self._up:
                raise UpstreamError(f"no healthy vLLM replica to load {name} on ({self._why_none()})")
            targets = [r for r in self._up if name not in r.versions]
            results = await asyncio.gather(*(r.upstream.load(name, path) for r in targets), return_exceptions=True)
            took = [r for r, e in zip(targets, results) if e is None]
            for r in took:
                r.versions[name] = path
            refused: Optional[tuple[Replica, BaseException]] = None
            for r, e in zip(targets, results):
                if isinstance(e, UpstreamError) and e.status is None:
                    self.mark_down(r, e.message)  # unreachable: it catches up when it rejoins
                    if refused is None and not any(name in x.versions for x in self._up):
                        refused = (r, e)  # ... unless no healthy replica is left with it
                elif e is not None:
                    refused = (r, e)
            if refused is not None:
                await asyncio.gather(*(self._unload_on(r, name) for r in took))
                r, e = refused
                if not isinstance(e, UpstreamError):
                    raise e
                raise UpstreamError(f"replica {r.url}: {e.message}; unloaded {name} from the other replicas, "
                                    "nothing changed", status=e.status)
            self._wanted[name] = path

    async def unload(self, name: str) -> None:
        """Unload from every healthy replica; raises with status 404 only when none had it."""
        async with self._lock:
            self._wanted.pop(name, None)
            targets = list(self._up)
            results = await asyncio.gather(*(r.upstream.unload(name) for r in targets), return_exceptions=True)
            gone = 0
            for r, e in zip(targets, results):
                if e is None or (isinstance(e, UpstreamError) and e.status == 404):
                    gone += e is None
                    r.versions.pop(name, None)
                elif isinstance(e, UpstreamError) and e.status is None:
                    self.mark_down(r, e.message)
                else:
                    raise e
            if not gone:
                raise UpstreamError(f"{name} is not loaded on any replica", status=404)

    async def _unload_on(self, r: Replica, name: str) -> None:
        try:
            await r.upstream.unload(name)
        except UpstreamError as e:
            if e.status != 404:
                log.error("could not unload %s from %s after a refused load: %s", name, r.url, e.message)
        r.versions.pop(name, None)

    async def models(self) -> dict[str, Optional[str]]:
        """What every replica serves: {id: path}; an id not served alike by all answering replicas maps to
        `PARTIAL`. Replicas that answer join (the registry reconciles them next); the others are out."""
        async with self._lock:
            answers = await asyncio.gather(*(r.upstream.models() for r in self.replicas), return_exceptions=True)
            seen: list[dict[str, Optional[str]]] = []
            for r, a in zip(self.replicas, answers):
                if isinstance(a, dict):
                    r.versions = a
                    seen.append(a)
                    self._mark_up(r)
                elif isinstance(a, UpstreamError):
                    self.mark_down(r, a.message)
                else:
                    raise a
            if not seen:
                raise UpstreamError(f"no vLLM replica answers ({self._why_none()})")
            merged: dict[str, Optional[str]] = {}
            for mid in {m for a in seen for m in a}:
                paths = {a.get(mid, PARTIAL) for a in seen}
                merged[mid] = paths.pop() if len(paths) == 1 else PARTIAL
            self._wanted = {m: p for m, p in merged.items() if p is not None and p != PARTIAL}
            self._reconciled = True
            return merged

    def _why_none(self) -> str:
        return "; ".join(f"{r.url}: {r.detail}" for r in self.replicas)

    # ---- health, restarts, rejoin --------------------------------------------------------------
    def start(self) -> None:
        """Start the health watcher (on the running loop); `close()` stops it."""
        if self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="replica-watch")

    async def close(self) -> None:
        """Stop watching, cancel restarts in progress, close the connection pools."""
        self._closing = True
        tasks = [t for t in (self._watcher, *self._restarts) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in self.replicas:
            await r.upstream.close()
        await asyncio.gather(*(asyncio.to_thread(lr.stop) for lr in self._owned))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.settings.replica_health_interval_s)
            for r, e in zip(self.replicas, await asyncio.gather(*(self._check(r) for r in self.replicas),
                                                                 return_exceptions=True)):
                if isinstance(e, Exception):  # a bug must not end the watching of every replica
                    log.error("checking replica %s failed", r.url, exc_info=e)

    async def _check(self, r: Replica) -> None:
        if r.restarting:
            return
        if r.local is not None and not r.local.alive:
            self.mark_down(r, f"vLLM exited with code {r.local.server.process.returncode}; restarting")
            r.restarting = True
            task = asyncio.get_running_loop().create_task(self._restart(r), name=f"restart-{r.url}")
            self._restarts.add(task)
            task.add_done_callback(self._restarts.discard)
            return
        ok, detail = await r.upstream.health()
        if not ok:
            self.mark_down(r, detail)
        elif not r.healthy and self._reconciled:
            try:
                await self._sync(r)
            except UpstreamError as e:
                r.detail = f"rejoining: {e.message}"
                log.warning("replica %s cannot rejoin yet: %s", r.url, e.message)

    async def _restart(self, r: Replica) -> None:
        assert r.local is not None
        local = r.local
        try:
            await asyncio.get_running_loop().run_in_executor(None, local.restart, lambda: self._closing)
            r.restarts += 1
            r.detail = "restarted; loading adapters"
        except Exception as e:  # a failed start is retried on the next check, after the interval
            r.detail = f"restart failed: {e}"
            log.error("restarting replica %s failed: %s", r.url, e)
        finally:
            r.restarting = False

    async def _sync(self, r: Replica) -> None:
        """Make `r` serve exactly the wanted adapters (leftovers unloaded, missing ones loaded), then let it in."""
        async with self._lock:
            served = await r.upstream.models()
            base = self.base_name
            if served.get(base, PARTIAL) is not None:
                raise UpstreamError(f"it does not serve the base model as {base!r} (it serves {sorted(served)})")
            for mid, path in list(served.items()):
                if path is not None and not _same_path(self._wanted.get(mid), path):
                    await r.upstream.unload(mid)
                    del served[mid]
            for name, path in self._wanted.items():
                if name not in served:
                    await r.upstream.load(name, path)
                    served[name] = path
            r.versions = served
            self._mark_up(r)


    # ---- blue/green: a new set for a full-weight version ----------------------------------------
    async def start_base(self, name: str, model_dir: Optional[str]) -> list[Replica]:
        """Start and warm as many local vLLMs as the set has, with the same flags, serving `model_dir` (None: the
        checkpoint the set was first started on) as `name`; nothing routes to them until `flip_base`. Raises
        `BaseConflictError` when a replica was not started here, `VLLMStartError` when one does not come up
        (those started are stopped; the current set keeps serving). A cancelled call, or the gateway closing
        meanwhile, stops what it started before it returns."""
        cfg, count = self._origin, len(self.replicas)
        if cfg is None or not all(r.local for r in self.replicas):
            raise BaseConflictError("full-weight versions need vLLM replicas started by this gateway (`looplift "
                                    "server start --model DIR --replicas N`), not --upstream URLs")
        log_path = cfg.log_path and cfg.log_path.with_name(f"{cfg.log_path.stem}-{name}{cfg.log_path.suffix}")
        new = replace(cfg, model_dir=Path(model_dir) if model_dir else cfg.model_dir, served_model_name=name,
                      port=0, log_path=log_path, warm_up=True)
        # Its own half of the cores/GPUs: next to a busy serving set on the same cores, a new vLLM's worker did
        # not finish starting within 300 s on 2 cores.
        half = 1 - self._half
        abandoned = threading.Event()

        def progress(_s: float, _line: str) -> None:  # about once a second in the starting thread
            if abandoned.is_set() or self._closing:
                raise _Cancelled("the promote that started this vLLM set was cancelled, or the gateway is closing")

        starting = asyncio.get_running_loop().run_in_executor(
            None, lambda: start_local_replicas(new, count, progress, first=half * count, total=2 * count))
        try:
            started = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The promote was cancelled (its request, the gateway's shutdown): the thread stops what it started
            # at its next progress tick; a set that came up meanwhile is stopped here. Nothing outlives the promote.
            abandoned.set()
            try:
                late = await starting
            except BaseException:  # _Cancelled, or the start's own error: whatever it started is stopped
                late = []
            await asyncio.gather(*(asyncio.to_thread(lr.stop) for lr in late))
            raise
        except _Cancelled:
            raise UpstreamError("the gateway is closing: the new vLLM set was stopped before it served") from None
        if self._closing:  # came up as the gateway closed: close() has stopped the sets it knew of
            await asyncio.gather(*(asyncio.to_thread(lr.stop) for lr in started))
            raise UpstreamError("the gateway is closing: the new vLLM set was stopped before it served")
        self._half = half  # only once it started: a retry after a failed start takes the same free half
        self._owned.update(started)
        new_set = [self._replica(lr) for lr in started]
        for r in new_set:  # started and warmed: healthy, serving only its base
            r.healthy, r.versions, r.detail = True, {name: None}, None
        return new_set

    def flip_base(self, name: str, new: list[Replica]) -> Coroutine[Any, Any, None]:
        """Route every new request to `new` (serving `name`) now; returns the coroutine that drains and stops
        the old set (requests already sent there finish)."""
        old, self.replicas = self.replicas, new
        self._up = list(new)
        self._affinity.clear()
        self._wanted = {}
        self.base_name = name
        return self._retire(old)

    async def _retire(self, old: list[Replica]) -> None:
        try:
            while any(r.in_flight for r in old):
                await asyncio.sleep(0.05)
            await asyncio.gather(*(asyncio.to_thread(r.local.stop) for r in old if r.local is not None))
            log.info("stopped the previous vLLM set (%s)", ", ".join(r.url for r in old))
        except asyncio.CancelledError:  # the gateway is closing: the old set must not outlive it
            for r in old:
                if r.local is not None:
                    r.local.stop()
            raise
        finally:
            for r in old:
                await r.upstream.close()
