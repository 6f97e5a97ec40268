"""Choosing a backend and making sandboxes and pools from a `SandboxConfig`.

`detect_backend()` picks "docker" when an engine answers a short ping and the configured image
exists there, else "local". Explicitly asking for "docker" never silently falls back: it raises the
error that says what is missing. This module holds no isolation logic of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from . import _defaults
from ._base import Sandbox
from ._config import SandboxConfig
from ._engine import docker_client, image_exists, require_image
from ._engines import EnginePlacer, EngineSpec, engines_from_env
from ._local import LocalSandbox
from ._pool import SandboxPool
from .errors import EngineUnavailableError

__all__ = ["BACKENDS", "BackendChoice", "choose_backend", "detect_backend", "family_backend", "family_pool_size",
           "make_pool", "make_sandbox"]

BACKENDS = ("docker", "local")
#: Environment variables task families read when not told: the backend (`looplift env try --sandbox`) and
#: their pools' size (`looplift env try --concurrency`).
BACKEND_ENV = "LOOPLIFT_SANDBOX"
POOL_SIZE_ENV = "LOOPLIFT_SANDBOX_POOL"


@dataclass(frozen=True)
class BackendChoice:
    """Which backend `detect_backend` picks, and why (shown by `looplift sandbox info`)."""

    backend: str
    reason: str


def choose_backend(prefer: str | None = None, image: str = _defaults.IMAGE) -> BackendChoice:
    """Like `detect_backend`, but also says why. `prefer` is "docker", "local", "auto" or None."""
    if prefer not in (None, "auto", *BACKENDS):
        raise ValueError(f"unknown sandbox backend {prefer!r}; use one of: auto, {', '.join(BACKENDS)}")
    if prefer == "local":
        return BackendChoice("local", "asked for the local backend")
    try:
        client = docker_client()
    except EngineUnavailableError as e:
        if prefer == "docker":
            raise
        return BackendChoice("local", f"no Docker engine: {e}")
    try:
        if prefer == "docker":
            require_image(client, image)
        elif not image_exists(client, image):
            return BackendChoice(
                "local", f"a Docker engine answers but image {image!r} is missing (`looplift sandbox build-image`)"
            )
        return BackendChoice("docker", f"a Docker engine answers and image {image!r} exists")
    finally:
        client.close()


def detect_backend(prefer: str | None = None, image: str = _defaults.IMAGE) -> str:
    """Return "docker" when a Docker engine answers (short ping) and `image` exists there, else "local".

    `prefer="local"` returns "local" without probing; `prefer="docker"` raises
    `EngineUnavailableError`/`ImageNotFoundError` (with the fix) instead of falling back.
    """
    return choose_backend(prefer, image).backend


def family_backend(backend: str | None) -> str | None:
    """The backend a task family's pools use: `backend` if given, else `$LOOPLIFT_SANDBOX`, else None (detect)."""
    return backend or os.environ.get(BACKEND_ENV) or None


def family_pool_size(size: int | None) -> int:
    """How many sandboxes a task family's episode pool holds: `size` if given, else `$LOOPLIFT_SANDBOX_POOL`,
    else the package default. Episodes beyond it wait for a sandbox."""
    raw = size if size is not None else os.environ.get(POOL_SIZE_ENV) or _defaults.POOL_SIZE
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"${POOL_SIZE_ENV} must be a whole number of sandboxes, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"a sandbox pool needs at least 1 sandbox, got {value}")
    return value


def make_sandbox(backend: str | None = None, config: SandboxConfig | None = None) -> Sandbox:
    """Start one sandbox of `backend` ("docker", "local", or None/"auto" to detect) with `config`."""
    config = config or SandboxConfig()
    name = detect_backend(backend, config.image) if backend in (None, "auto") else backend
    if name == "docker":
        from ._docker import DockerSandbox

        return DockerSandbox(config)
    if name == "local":
        return LocalSandbox(config)
    raise ValueError(f"unknown sandbox backend {backend!r}; use one of: auto, {', '.join(BACKENDS)}")


def make_pool(
    backend: str | None = None,
    config: SandboxConfig | None = None,
    size: int = _defaults.POOL_SIZE,
    *,
    engines: Sequence[EngineSpec | str] | None = None,
) -> SandboxPool:
    """Start a `SandboxPool` of `size` sandboxes of `backend` (None/"auto" detects) with `config`.

    Docker sandboxes in one pool share a docker-py client per engine. `engines` (default:
    `$LOOPLIFT_SANDBOX_ENGINES`, else the one engine at DOCKER_HOST) spreads the pool over several Docker
    engines by capacity, and a dead engine's sandboxes are replaced on the others (see `_engines`).
    """
    config = config or SandboxConfig()
    specs = [e if isinstance(e, EngineSpec) else EngineSpec.parse(e) for e in engines] if engines else engines_from_env()
    if specs and backend in (None, "auto", "docker"):
        placer = EnginePlacer(specs, config)
        return SandboxPool(placer, size, on_close=placer.close)
    name = detect_backend(backend, config.image) if backend in (None, "auto") else backend
    if name == "docker":
        from ._docker import DockerSandbox

        client = docker_client()
        require_image(client, config.image)
        # The shared client must outlive every sandbox in the pool, so it closes after the pool does.
        return SandboxPool(lambda: DockerSandbox(config, client=client), size, on_close=client.close)
    if name == "local":
        return SandboxPool(lambda: LocalSandbox(config), size)
    raise ValueError(f"unknown sandbox backend {backend!r}; use one of: auto, {', '.join(BACKENDS)}")


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
