"""`SandboxPool`: started sandboxes handed out one at a time, reset between uses, replaced when broken.

Starting a container takes ~0.3–1 s; an exec in a warm one tens of milliseconds. The pool keeps up
to `size` sandboxes and hands out only live ones: `acquire()` checks that the sandbox still runs
(a container that died, was killed or was removed by hand is closed and replaced, never handed
out), and a returned sandbox is reset (processes killed, workdir emptied) on a background thread
before anyone gets it again. Failed or dead sandboxes are replaced in the background too (an idle one that
died is found within IDLE_CHECK_S, so the next acquire does not wait for its replacement to start); a start
that failed is retried by the next `acquire`, and every START_RETRY_S by an `acquire` that is waiting.

Thread-safe: many episodes may acquire from worker threads at once; `aacquire()` is the same for
asyncio code (the blocking parts run in a thread). `size` bounds the sandboxes alive at once, so
`acquire` waits when all are in use.

`stats()` reads the pool's counters (a few ints under the lock, cheap enough for every step): the task
environments put `PoolStats.snapshot()` into each step's `StepResult.info["sandbox_pool"]`, so the pool's
size and load reach the collector with the trajectories and the dashboard shows them per app (the pool lives
in the app's process; the collector never sees it otherwise).

Not done here: growing past `size` on demand, per-tenant pools, a Prometheus export of the stats.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Self

from . import _defaults
from ._base import Sandbox
from .errors import SandboxClosedError, SandboxError

__all__ = ["PoolStats", "SandboxPool"]


@dataclass(frozen=True)
class PoolStats:
    """What a `SandboxPool` holds right now, and what happened to it since it started."""

    #: Sandboxes the pool keeps (its bound).
    size: int
    #: Borrowed by an episode now.
    in_use: int
    #: Started, clean, ready to hand out.
    idle: int
    #: Given back and being reset before anyone gets them again.
    resetting: int
    #: Starts in flight.
    starting: int
    #: Sandboxes started since the pool was made (the first one included).
    started: int
    #: Starts that raised (the engine or image was missing, the engine was full or down).
    start_failures: int
    #: Sandboxes thrown away because they died or would not reset (each is replaced).
    replaced: int

    def snapshot(self) -> dict[str, int]:
        """The stats as a small JSON object: what goes into `StepResult.info["sandbox_pool"]`."""
        return asdict(self)


class SandboxPool:
    """A bounded pool of `size` sandboxes made by `factory` (e.g. `lambda: DockerSandbox(config)`).

    The first sandbox starts in the constructor (so a missing engine or image raises right here),
    the others in the background. Use `with pool.acquire() as sb:` or `async with pool.aacquire() as
    sb:`; call `close()` (or use the pool as a context manager) to remove every sandbox. `on_close`
    runs after that (e.g. to close a client the sandboxes shared).
    """

    def __init__(
        self,
        factory: Callable[[], Sandbox],
        size: int = _defaults.POOL_SIZE,
        *,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"SandboxPool size must be >= 1, got {size}")
        self._factory = factory
        self._on_close = on_close
        self.size = size
        self._cond = threading.Condition()
        self._idle: deque[Sandbox] = deque()
        self._all: set[Sandbox] = set()  # idle, in use and being reset
        self._starting = 0
        self._resetting = 0
        self._started = 1  # the first sandbox, below
        self._start_failures = 0
        self._replaced = 0
        self._closed = False
        self._last_error: BaseException | None = None
        # Maintenance (starting, resetting, closing sandboxes) runs here so that callers never wait
        # on it; a few workers so that one slow container start does not hold up resets.
        self._workers = ThreadPoolExecutor(max_workers=min(size, 4), thread_name_prefix="sandbox-pool")
        first = factory()
        with self._cond:
            self._all.add(first)
            self._idle.append(first)
        self._refill()
        self._stop = threading.Event()
        threading.Thread(target=self._watch_idle, name="sandbox-pool-watch", daemon=True).start()

    # -- public -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[Sandbox]:
        """Borrow a live, clean sandbox for the `with` block; it is reset and returned afterwards.

        Waits up to `timeout` seconds (forever when None) while every sandbox is in use, and raises
        `SandboxError` when none became free or none could be started (with the factory's error).
        """
        sandbox = self._take(timeout)
        try:
            yield sandbox
        finally:
            self._give_back(sandbox)

    @contextlib.asynccontextmanager
    async def aacquire(self, timeout: float | None = None) -> AsyncIterator[Sandbox]:
        """`acquire` for asyncio code: `async with pool.aacquire() as sb:` (waiting runs in a thread)."""
        sandbox = await asyncio.to_thread(self._take, timeout)
        try:
            yield sandbox
        finally:
            self._give_back(sandbox)  # only enqueues work; never blocks the event loop

    @property
    def idle(self) -> int:
        """Sandboxes ready to hand out right now."""
        with self._cond:
            return len(self._idle)

    def stats(self) -> PoolStats:
        """The pool's counters now (one lock, no engine round trip): see `PoolStats`."""
        with self._cond:
            alive, idle = len(self._all), len(self._idle)
            return PoolStats(size=self.size, in_use=max(alive - idle - self._resetting, 0), idle=idle,
                             resetting=self._resetting, starting=self._starting, started=self._started,
                             start_failures=self._start_failures, replaced=self._replaced)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until all `size` sandboxes are started and idle; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._idle) < self.size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0 or (self._last_error is not None and self._starting == 0 and not self._idle):
                    return False
                self._cond.wait(left)
            return not self._closed

    def close(self) -> None:
        """Close every sandbox, in use or not, and stop the background work. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            everything = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._cond.notify_all()
        self._workers.shutdown(wait=True, cancel_futures=True)
        for sandbox in everything:
            _close_quietly(sandbox)
        if self._on_close is not None:
            self._on_close()
        # A start that was in flight when we closed finishes in _start_one, which sees _closed.

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------------

    def _take(self, timeout: float | None) -> Sandbox:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # Retries starts that failed earlier (the engine restarted; on several engines, one was down and
            # the others full), also while this call waits: every START_RETRY_S until a sandbox is free.
            self._refill()
            with self._cond:
                sandbox = self._wait_for_idle(deadline, timeout)
            if sandbox is None:
                continue
            # Checked outside the lock: it is an engine round trip.
            if sandbox.is_alive():
                return sandbox
            self._discard(sandbox)

    def _wait_for_idle(self, deadline: float | None, timeout: float | None) -> Sandbox | None:
        """An idle sandbox (taken out of the idle queue), or None when a failed start should be retried now.
        Called with the lock held."""
        while not self._idle:
            if self._closed:
                raise SandboxClosedError("the sandbox pool was closed; make a new one with make_pool()")
            if self._last_error is not None and self._starting == 0 and len(self._all) == 0:
                raise SandboxError(f"the pool could not start any sandbox: {self._last_error}") from self._last_error
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise SandboxError(
                    f"no sandbox became free within {timeout}s (all {self.size} in use); "
                    "raise the pool size or release sandboxes sooner"
                )
            if len(self._all) + self._starting < self.size:  # a start failed: wait a little, then retry it
                self._cond.wait(_defaults.START_RETRY_S if left is None else min(left, _defaults.START_RETRY_S))
                return self._idle.popleft() if self._idle else None
            self._cond.wait(left)
        return self._idle.popleft()

    def _watch_idle(self) -> None:
        """Every IDLE_CHECK_S, replace the idle sandboxes whose container died (outside the lock: an engine round
        trip each). One an acquire took meanwhile is left to that acquire's own check."""
        while not self._stop.wait(_defaults.IDLE_CHECK_S):
            with self._cond:
                idle = list(self._idle)
            for sandbox in idle:
                try:
                    alive = sandbox.is_alive()
                except Exception:  # noqa: BLE001 - a sandbox that cannot say it is alive is replaced
                    alive = False
                if alive or self._stop.is_set():
                    continue
                with self._cond:
                    if sandbox not in self._idle:
                        continue
                    self._idle.remove(sandbox)
                self._discard(sandbox)

    def _give_back(self, sandbox: Sandbox) -> None:
        with self._cond:
            if self._closed or sandbox not in self._all:
                closed = True
            else:
                closed = False
        if closed:
            _close_quietly(sandbox)
            return
        with self._cond:
            self._resetting += 1
        try:
            self._workers.submit(self._reset, sandbox)
        except RuntimeError:  # the executor shut down: the pool is closing
            with self._cond:
                self._resetting -= 1
            _close_quietly(sandbox)

    def _reset(self, sandbox: Sandbox) -> None:
        try:
            sandbox.reset()
            healthy = sandbox.is_alive()
        except Exception:  # noqa: BLE001 - a broken sandbox is replaced; why it broke is the next start's problem
            healthy = False
        with self._cond:
            self._resetting -= 1
        if not healthy:
            self._discard(sandbox)
            return
        with self._cond:
            if self._closed:
                closed = True
            else:
                closed = False
                self._idle.append(sandbox)
                self._cond.notify()
        if closed:
            _close_quietly(sandbox)

    def _discard(self, sandbox: Sandbox) -> None:
        with self._cond:
            if sandbox in self._all:
                self._replaced += 1
            self._all.discard(sandbox)
        _close_quietly(sandbox)
        self._refill()

    def _refill(self) -> None:
        with self._cond:
            if self._closed:
                return
            missing = self.size - len(self._all) - self._starting
            self._starting += max(missing, 0)
        for _ in range(max(missing, 0)):
            try:
                self._workers.submit(self._start_one)
            except RuntimeError:
                return

    def _start_one(self) -> None:
        try:
            sandbox = self._factory()
        except Exception as e:  # noqa: BLE001 - kept and raised by acquire when nothing else can be handed out
            with self._cond:
                self._starting -= 1
                self._start_failures += 1
                self._last_error = e
                self._cond.notify_all()
            return
        with self._cond:
            self._starting -= 1
            if not self._closed:
                self._started += 1
                self._all.add(sandbox)
                self._idle.append(sandbox)
                self._last_error = None
                self._cond.notify()
                return
        _close_quietly(sandbox)


def _close_quietly(sandbox: Sandbox) -> None:
    try:
        sandbox.close()
    except Exception:  # noqa: BLE001, S110 - closing is best effort; the container label lets leftovers be found
        pass
