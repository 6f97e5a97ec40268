"""The exceptions the sandboxes package raises, as one tree.

Only failures of the machinery raise: no engine, no image, a container that vanished, a bad
argument. What the executed code does — a non-zero exit, a timeout, running out of memory — is an
`ExecResult`, never an exception. Every message says how to fix the problem and names the sandbox
(container id) where there is one.

    SandboxError
    ├── EngineUnavailableError   no Docker engine answered
    ├── ImageNotFoundError       the sandbox image is not there
    ├── ImageBuildError          build_image could not make the image
    ├── SandboxStartError        a container (or local workdir) could not be started
    ├── SandboxBrokenError       a started sandbox died or stopped answering
    ├── SandboxClosedError       the sandbox or pool was used after close()
    └── SandboxFileError         write_file/read_file failed (missing file, bad path, too big)
"""

from __future__ import annotations

__all__ = [
    "EngineUnavailableError",
    "ImageBuildError",
    "ImageNotFoundError",
    "SandboxBrokenError",
    "SandboxClosedError",
    "SandboxError",
    "SandboxFileError",
    "SandboxStartError",
]


class SandboxError(Exception):
    """Base class of every error this package raises.

    `sandbox_id` names the container (or local workdir) involved, when there is one.
    """

    def __init__(self, message: str, *, sandbox_id: str | None = None) -> None:
        self.sandbox_id = sandbox_id
        if sandbox_id:
            message = f"[sandbox {sandbox_id}] {message}"
        super().__init__(message)


class EngineUnavailableError(SandboxError):
    """No Docker engine answered (or the docker package is not installed)."""


class ImageNotFoundError(SandboxError):
    """The sandbox image does not exist on the engine; build it with `looplift sandbox build-image`."""


class ImageBuildError(SandboxError):
    """`build_image` could not produce the image (no registry, no debootstrap, not root, …)."""


class SandboxStartError(SandboxError):
    """A sandbox could not be started."""


class SandboxBrokenError(SandboxError):
    """A sandbox that was running died or stopped answering; replace it (a pool does so itself)."""


class SandboxClosedError(SandboxError):
    """The sandbox or pool was used after `close()`."""


class SandboxFileError(SandboxError):
    """A file could not be written to or read from the sandbox's workdir."""
