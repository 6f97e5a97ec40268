"""Where a loop's wall time goes: generation, environment, training, adapter save/load (the gate, a
serial step after the updates, is timed by the caller around the job).

Parts of the loop mark themselves busy (`with timeline.busy("training"):`), from any thread; requests
to the model server are marked by `TimedTransport` (an httpx transport wrapper, so the SDK's own
OpenAI client is timed without touching its code) and environment calls by `timed_env`. Each instant
of wall time is attributed to exactly one part, the first busy one in `PRIORITY` order, so the parts
add up to the wall time even when they overlap (the async loop trains while it generates); `busy_s`
separately keeps each part's own busy time, overlaps included, and `idle_fraction("generation")` is
the share of wall time no request was in flight (the model server was idle).

Deliberately not here: per-request latency histograms (the gateway's /metrics has them).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import httpx

if TYPE_CHECKING:
    from sdk import Environment, StepResult, Task, ToolCall

# Generation outranks training so that, when both run at once (async), the overlap shows up as generation
# time that training did not add; environment time counts only while no request is in flight.
PRIORITY = ("adapter", "generation", "training", "environment")


class Timeline:
    """Busy counters per part, integrated over wall time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = {k: 0 for k in PRIORITY}
        self._exclusive = {k: 0.0 for k in (*PRIORITY, "other")}
        self._busy = {k: 0.0 for k in PRIORITY}
        self._t0 = self._last = time.perf_counter()

    def _advance(self) -> None:
        now = time.perf_counter()
        dt, self._last = now - self._last, now
        top = next((k for k in PRIORITY if self._active[k] > 0), "other")
        self._exclusive[top] += dt
        for k in PRIORITY:
            if self._active[k] > 0:
                self._busy[k] += dt

    def enter(self, part: str) -> None:
        with self._lock:
            self._advance()
            self._active[part] += 1

    def exit(self, part: str) -> None:
        with self._lock:
            self._advance()
            self._active[part] -= 1

    @contextmanager
    def busy(self, part: str) -> Iterator[None]:
        self.enter(part)
        try:
            yield
        finally:
            self.exit(part)

    def snapshot(self) -> dict[str, Any]:
        """{"wall_s", "split_s": {part: seconds, ..., "other"}, "busy_s": {part: seconds}} so far."""
        with self._lock:
            self._advance()
            return {"wall_s": round(self._last - self._t0, 3),
                    "split_s": {k: round(v, 3) for k, v in self._exclusive.items()},
                    "busy_s": {k: round(v, 3) for k, v in self._busy.items()}}

    def split_since(self, before: dict[str, Any]) -> dict[str, float]:
        """Seconds per part (they add up to the wall time) since an earlier `snapshot()`."""
        now = self.snapshot()
        return {k: round(now["split_s"][k] - before["split_s"][k], 3) for k in now["split_s"]}

    def idle_fraction(self, part: str = "generation") -> float:
        snap = self.snapshot()
        return 1.0 - snap["busy_s"][part] / snap["wall_s"] if snap["wall_s"] else 0.0


class TimedTransport(httpx.AsyncBaseTransport):
    """Wraps an async httpx transport; every request counts as `part` busy while it is in flight."""

    def __init__(self, timeline: Timeline, inner: Optional[httpx.AsyncBaseTransport] = None, part: str = "generation"):
        self._tl, self._inner, self._part = timeline, inner or httpx.AsyncHTTPTransport(), part

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._tl.enter(self._part)
        try:
            resp = await self._inner.handle_async_request(request)
            await resp.aread()  # the body is part of the generation time
            return resp
        finally:
            self._tl.exit(self._part)

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TimedEnv:
    """`env` with its reset/step/step_tool calls counted as `environment` busy; everything else it offers (its
    `tools`, ...) passes through, and it has `step_tool` only when `env` has one (the SDK asks with getattr)."""

    def __init__(self, env: Environment, timeline: Timeline) -> None:
        self._env, self._tl = env, timeline
        if callable(getattr(env, "step_tool", None)):
            self.step_tool = self._step_tool

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def _step_tool(self, call: ToolCall) -> StepResult:
        with self._tl.busy("environment"):
            result: StepResult = getattr(self._env, "step_tool")(call)  # noqa: B009 - an optional member
            return result

    def reset(self, task: Task) -> str:
        with self._tl.busy("environment"):
            return self._env.reset(task)

    def step(self, action: str) -> StepResult:
        with self._tl.busy("environment"):
            return self._env.step(action)

    def close(self) -> None:
        close = getattr(self._env, "close", None)
        if close is not None:
            close()


def timed_env(factory: Callable[[], Environment], timeline: Timeline) -> Callable[[], Environment]:
    """An environment factory whose environments count their reset/step calls as `environment` busy."""
    return lambda: _TimedEnv(factory(), timeline)
