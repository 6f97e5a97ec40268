"""Isolated execution of model-written code.

Two backends behind one `Sandbox` interface: `DockerSandbox` (a hardened, network-less container per
sandbox; each command is forked by a small runner inside it, `_inner.py`, never a `docker exec`) and
`LocalSandbox` (host subprocesses with rlimits and, where the host allows, namespaces; a fallback, not a
security boundary — see `LOCAL_LIMITATIONS`).
`SandboxPool` keeps sandboxes warm for concurrent episodes, on one Docker engine or spread over several
by capacity (`EnginePlacer`, `EngineSpec`, `$LOOPLIFT_SANDBOX_ENGINES`). `make_sandbox`/`make_pool` pick the
backend with `detect_backend`. Whatever the code does comes back as an `ExecResult`; only failures
of the machinery raise (`sandboxes.errors`).

Task families (`env_families()`: name -> lazy loader of an `sdk.EnvFamily`) live in private
sub-packages, e.g. `_extraction` (financial reports read through tools).

`import sandboxes` needs neither docker-py nor an engine; the Docker backend imports docker when a
DockerSandbox is made.
"""

from __future__ import annotations

from ._arithmetic import ArithmeticEnv, ArithmeticVerifier, demonstration, held_out_tasks, training_tasks
from ._arithmetic_suite import arithmetic_suite
from ._base import ExecResult, OutputCallback, Sandbox
from ._config import SandboxConfig
from ._docker import DockerSandbox, reap_orphans
from ._engines import EnginePlacer, EngineSpec
from ._envs import CodeEnv, ShellEnv
from ._families import build_coding_tasks, env_families
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
    "ArithmeticEnv",
    "ArithmeticVerifier",
    "arithmetic_suite",
    "demonstration",
    "held_out_tasks",
    "training_tasks",
    "LOCAL_LIMITATIONS",
    "BackendChoice",
    "CodeEnv",
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
    "ShellEnv",
    "build_coding_tasks",
    "build_image",
    "choose_backend",
    "detect_backend",
    "env_families",
    "make_pool",
    "make_sandbox",
    "reap_orphans",
]

