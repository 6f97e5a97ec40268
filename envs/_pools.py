"""Where a task family's sandboxes come from: the backend and pool size it uses when not told, and the
pair of pools (episodes, verifier) a family starts on first use.

Families read `$LOOPLIFT_SANDBOX` (`looplift env try --sandbox`) and `$LOOPLIFT_SANDBOX_POOL`
(`looplift env try --concurrency`) when their caller names neither. The pools themselves are the
sandboxes package's (`make_pool`); nothing here isolates anything.

Never on a sandbox that sees the host, unless asked. The local backend runs model code as host
processes: it sees this machine's files (the checkout, installed packages and their data, e.g. the
HumanEval reference solutions), so a policy trained or gated there can score by reading them. So a
family's pools:
  * never fall back from Docker to local: with no backend named they start Docker sandboxes, and when no
    engine answers the error says how to get one (`scripts/setup_docker.sh`) or how to opt out;
  * take the local backend from `$LOOPLIFT_SANDBOX=local` only with `$LOOPLIFT_SANDBOX_UNSAFE=1` too
    (`looplift env try --sandbox local --unsafe`, `looplift demo --sandbox local --unsafe`), or with
    `allow_host=True` where the backend is resolved (`family_backend`);
  * take it from code that names it (`family(backend="local")`, `arithmetic_suite(backend="local")`):
    naming the backend in code is the explicit ask.
Every pool that starts local sandboxes logs a warning (logger `envs`).
"""

from __future__ import annotations

import logging
import os
import threading

from sandboxes import EngineUnavailableError, SandboxConfig, SandboxPool, SandboxStartError, make_pool
from sandboxes import defaults as sandbox_defaults

__all__ = ["BACKEND_ENV", "HOST_FIX", "HOST_WARNING", "POOL_SIZE_ENV", "UNSAFE_ENV", "FamilyPools", "family_backend",
           "family_pool_size", "start_family_pool"]

#: Environment variables task families read when not told: the backend (`looplift env try --sandbox`) and
#: their pools' size (`looplift env try --concurrency`).
BACKEND_ENV = "LOOPLIFT_SANDBOX"
POOL_SIZE_ENV = "LOOPLIFT_SANDBOX_POOL"
#: Set to 1 (by `--unsafe`) to let `$LOOPLIFT_SANDBOX=local` through: see the module docstring.
UNSAFE_ENV = "LOOPLIFT_SANDBOX_UNSAFE"

#: How to get a sandbox that does not see the host, or to opt out knowingly: the end of every refusal (here,
#: `looplift env try`, `looplift demo`).
HOST_FIX = ("start Docker (`scripts/setup_docker.sh`, then `looplift sandbox build-image`), or, knowing that model "
            "code then sees this machine's files, pass `--sandbox local --unsafe`")
FIX = HOST_FIX + ' (in code: backend="local")'
#: What is printed or logged wherever local sandboxes start for a family, the gate or the demo.
HOST_WARNING = ("the local sandbox backend runs model code on this host: it can read this machine's files (the "
                "checkout, installed packages and their data), so scores from it can be earned by reading them; "
                "use Docker for training and gates")

_log = logging.getLogger("envs")


def _unsafe_env() -> bool:
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


def family_backend(backend: str | None, *, allow_host: bool | None = None) -> str | None:
    """The backend a task family's pools use: `backend` if given, else `$LOOPLIFT_SANDBOX`, else None (Docker,
    without fallback: see `start_family_pool`).

    `$LOOPLIFT_SANDBOX=local` counts only with `allow_host=True` or `$LOOPLIFT_SANDBOX_UNSAFE=1`; else this raises
    `SandboxStartError` saying how to get Docker or opt out. A `backend` argument is taken as given (code that
    names "local" asked for it); `allow_host=False` refuses local even then.
    """
    name = backend or os.environ.get(BACKEND_ENV) or None
    allowed = allow_host if allow_host is not None else (backend == "local" or _unsafe_env())
    if name == "local" and not allowed:
        how = f"${BACKEND_ENV}=local without ${UNSAFE_ENV}=1" if not backend else "backend='local' with allow_host=False"
        raise SandboxStartError(f"refusing the local sandbox backend ({how}): it sees this machine's files; {FIX}")
    return name


def start_family_pool(backend: str | None, config: SandboxConfig, size: int) -> SandboxPool:
    """A pool for a family: `backend` ("docker", "local" already allowed by `family_backend`, or None for Docker).
    Never falls back to local: no Docker engine raises `EngineUnavailableError` with how to get one."""
    name = backend or "docker"
    if name == "local":
        _log.warning(HOST_WARNING)
    try:
        return make_pool(name, config, size=size)
    except EngineUnavailableError as e:
        if backend is not None:
            raise
        raise EngineUnavailableError(f"{e}; task families never fall back to the local backend: {FIX}") from e


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
                episodes = start_family_pool(self.backend, self.config, self.size)
                try:
                    verifier = start_family_pool(self.backend, self.config, max(1, min(self.size, 2)))
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
