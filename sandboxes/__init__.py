"""Isolated execution of model-written code.

Two backends behind one `Sandbox` interface: `DockerSandbox` (a hardened, network-less container per
sandbox; each command is forked by a small runner inside it, `_inner.py`, never a `docker exec`) and
`LocalSandbox` (host subprocesses with rlimits and, where the host allows, namespaces; a fallback, not a
security boundary — see `LOCAL_LIMITATIONS`).
`SandboxPool` keeps sandboxes warm for concurrent episodes, on one Docker engine or spread over several
by capacity (`EnginePlacer`, `EngineSpec`, `$LOOPLIFT_SANDBOX_ENGINES`). `make_sandbox`/`make_pool` pick the
backend with `detect_backend`. Whatever the code does comes back as an `ExecResult`; only failures
of the machinery raise (`sandboxes.errors`).

Task families (arithmetic, coding, extraction, modeling) are not here: they live one layer up, in
`envs`, on top of this package's public API. `defaults` holds the package's default values (image tags,
limits, pool size) for the layers above.

`import sandboxes` needs neither docker-py nor an engine; the Docker backend imports docker when a
DockerSandbox is made.
"""

from __future__ import annotations

from . import _defaults as defaults
from ._base import ExecResult, OutputCallback, Sandbox
from ._config import SandboxConfig
from ._docker import DockerSandbox, reap_orphans
from ._engines import EnginePlacer, EngineSpec
from ._factory import BackendChoice, choose_backend, detect_backend, make_pool, make_sandbox
from ._image import build_image
from ._local import LIMITATIONS as LOCAL_LIMITATIONS
from ._local import LocalSandbox
from ._pool import PoolStats, SandboxPool
from ._snapshot import EnvSnapshot
from .errors import (
    EngineUnavailableError,
    ImageBuildError,
    ImageNotFoundError,
    SandboxBrokenError,
    SandboxClosedError,
    SandboxError,
    SandboxFileError,
    SandboxStartError,
)

__all__ = [
    "LOCAL_LIMITATIONS",
    "BackendChoice",
    "DockerSandbox",
    "EnginePlacer",
    "EngineSpec",
    "EnvSnapshot",
    "EngineUnavailableError",
    "ExecResult",
    "ImageBuildError",
    "ImageNotFoundError",
    "LocalSandbox",
    "OutputCallback",
    "PoolStats",
    "Sandbox",
    "SandboxBrokenError",
    "SandboxClosedError",
    "SandboxConfig",
    "SandboxError",
    "SandboxFileError",
    "SandboxPool",
    "SandboxStartError",
    "build_image",
    "defaults",
    "choose_backend",
    "detect_backend",
    "make_pool",
    "make_sandbox",
    "reap_orphans",
]

