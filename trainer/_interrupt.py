"""Stopping a retrain job cleanly: a stop request, checked at safe points, and SIGTERM wired to it.

A job runs in the main thread (`trainer run`) or in a scheduler thread (`trainer schedule`,
`looplift up --retrain`). Either way it stops through a `StopToken`: `request()` sets it, the job calls
`check()` between stages, every optimizer step and every eval episode, and `check()` raises
`JobInterrupted`. In the main thread `sigterm_stops(token)` also raises at once from the signal
handler, so a job blocked in a long call stops too.

The alias flip is the one step that must not be cut in half: inside `token.critical()` a signal only
records the request; the flip completes and the run is recorded as promoted. Everything before it
leaves the serving version untouched (a loaded candidate is just a registered, unserved version).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Optional

from .errors import JobInterrupted

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopToken:
    """A stop request shared between whoever stops a job and the job itself. Thread-safe."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.reason: Optional[str] = None
        self._critical = 0

    def request(self, reason: str) -> None:
        """Ask the job to stop; `reason` ends up in the run's record."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
        self._event.set()

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self._event.is_set()

    @property
    def in_critical(self) -> bool:
        """Whether the job is inside `critical()` right now."""
        return self._critical > 0

    def check(self) -> None:
        """Raise `JobInterrupted` if a stop was requested (and we are not inside `critical()`)."""
        if self._event.is_set() and not self._critical:
            raise JobInterrupted(self.reason or "stop requested")

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` seconds or until a stop is requested; returns whether it was."""
        return self._event.wait(timeout)

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A block no stop request cuts short (the alias flip)."""
        with self._lock:
            self._critical += 1
        try:
            yield
        finally:
            with self._lock:
                self._critical -= 1


@contextlib.contextmanager
def sigterm_stops(token: StopToken) -> Iterator[None]:
    """In the main thread: SIGTERM/SIGINT/SIGHUP request a stop and raise `JobInterrupted` right away
    (outside `critical()`); the previous handlers come back afterwards. Elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Optional[FrameType]) -> None:
        name = signal.Signals(signum).name
        token.request(name)
        if not token.in_critical:
            raise JobInterrupted(name)

    with contextlib.ExitStack() as restore:
        for signum in _SIGNALS:
            restore.callback(signal.signal, signum, signal.signal(signum, handler))
        yield
