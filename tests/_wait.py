"""`wait_until`: poll a condition with a deadline (tests never assert on timing; they wait for events)."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 10.0, every: float = 0.05) -> None:
    """Return once `cond()` is true; raise `AssertionError` naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for: {what}")
        time.sleep(every)
