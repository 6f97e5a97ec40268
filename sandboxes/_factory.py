"""Choosing a backend and making sandboxes and pools from a `SandboxConfig`.

`detect_backend()` picks "docker" when an engine answers a short ping and the configured image
exists there, else "local". Explicitly asking for "docker" never silently falls back: it raises the
error that says what is missing. This module holds no isolation logic of its own.
"""

from __future__ import annotations

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

__all__ = ["BACKENDS", "BackendChoice", "choose_backend", "detect_backend", "make_pool", "make_sandbox"]

BACKENDS = ("docker", "local")


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
