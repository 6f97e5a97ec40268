"""Where a task family's sandboxes come from: the backend and pool size it uses when not told, and the
pair of pools (episodes, verifier) a family starts on first use.

Families read `$LOOPLIFT_SANDBOX` (`looplift env try --sandbox`) and `$LOOPLIFT_SANDBOX_POOL`
(`looplift env try --concurrency`) when their caller names neither. The pools themselves are the
sandboxes package's (`make_pool`); nothing here isolates anything.
"""

from __future__ import annotations

import os
import threading

from sandboxes import SandboxConfig, SandboxPool, make_pool
from sandboxes import defaults as sandbox_defaults

__all__ = ["BACKEND_ENV", "POOL_SIZE_ENV", "FamilyPools", "family_backend", "family_pool_size"]

#: Environment variables task families read when not told: the backend (`looplift env try --sandbox`) and
#: their pools' size (`looplift env try --concurrency`).
BACKEND_ENV = "LOOPLIFT_SANDBOX"
POOL_SIZE_ENV = "LOOPLIFT_SANDBOX_POOL"


def family_backend(backend: str | None) -> str | None:
    """The backend a task family's pools use: `backend` if given, else `$LOOPLIFT_SANDBOX`, else None (detect)."""
    return backend or os.environ.get(BACKEND_ENV) or None


def family_pool_size(size: int | None) -> int:
    """How many sandboxes a task family's episode pool holds: `size` if given, else `$LOOPLIFT_SANDBOX_POOL`,
    else the package default. Episodes beyond it wait for a sandbox."""
    raw = size if size is not None else os.environ.get(POOL_SIZE_ENV) or sandbox_defaults.POOL_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${POOL_SIZE_ENV} must be a whole number of sandboxes, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"a sandbox pool needs at least 1 sandbox, got {value}")
    return value



class FamilyPools:
    """A task family's two sandbox pools -- one for its episodes, the verifier's own (at most 2), so a verifier
    never waits for a sandbox an episode holds -- started on first `get()`: loading a family starts nothing."""

    def __init__(self, backend: str | None, size: int, config: SandboxConfig) -> None:
        self.backend, self.size, self.config = backend, size, config
        self._lock = threading.Lock()
        self._pools: tuple[SandboxPool, SandboxPool] | None = None

    def get(self) -> tuple[SandboxPool, SandboxPool]:
        """(episodes, verifier), started now if they are not yet."""
        with self._lock:
            if self._pools is None:
                episodes = make_pool(self.backend, self.config, size=self.size)
                try:
                    verifier = make_pool(self.backend, self.config, size=max(1, min(self.size, 2)))
                except BaseException:
                    episodes.close()
                    raise
                self._pools = (episodes, verifier)
            return self._pools

    def close(self) -> None:
        """Close both pools (their sandboxes are removed); a later `get()` starts new ones."""
        with self._lock:
            pools, self._pools = self._pools, None
        for pool in pools or ():
            pool.close()
