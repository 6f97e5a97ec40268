"""Shutdown on SIGTERM / SIGINT / SIGHUP from the first second of a long command (`looplift up`/`demo`,
`looplift server start`).

`with shutdown_on_signals():` turns the first of those signals into a `Shutdown` exception raised in
the main thread wherever it is (building the base model, waiting for vLLM, serving), so every `with`
and `finally` on the way out runs and stops what was started. Further signals during that cleanup are
counted but do not interrupt it (an impatient second Ctrl-C must not leave a vLLM behind); the stop
helpers escalate to SIGKILL on their own after a grace period.

Deliberately not here: SIGKILL, which no handler sees; children survive it only if they are not
tied to us (see `sdk.infra.spawn_tied`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Shutdown(BaseException):
    """Raised in the main thread by the first shutdown signal. A BaseException, like KeyboardInterrupt,
    so `except Exception` blocks on the way do not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def shutdown_on_signals() -> Iterator[None]:
    """Install the handlers for the block (main thread only; elsewhere a no-op) and restore them after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: Optional[FrameType]) -> None:
        fired.append(signum)
        if len(fired) == 1:
            raise Shutdown(signum)

    previous: dict[int, Any] = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
