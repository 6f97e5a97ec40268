"""`SandboxConfig`: the one small, stable config every sandbox backend and pool reads.

Each field maps 1:1 to a CLI flag of `looplift sandbox exec`. Backend-specific knobs that are not
worth a stable field (seccomp profiles, runtimes such as gVisor) are deliberately absent; a later
hardening pass adds them behind an explicitly unstable escape hatch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import _defaults

__all__ = ["SandboxConfig"]


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and image of a sandbox. Immutable; derive variants with `dataclasses.replace`."""

    #: Docker image tag to run (ignored by the local backend).
    image: str = _defaults.IMAGE
    #: Memory limit in MiB. Docker: cgroup limit with swap disabled (exceeding it is an OOM kill,
    #: reported as `oom_killed`). Local: RLIMIT_AS, i.e. address space, which is stricter than RSS.
    memory_mb: int = _defaults.MEMORY_MB
    #: Most processes/threads alive at once (Docker cgroup pids limit; the local backend relies on its
    #: pid namespace instead, see `LocalSandbox.LIMITATIONS`).
    pids: int = _defaults.PIDS
    #: CPU cores the sandbox may use (Docker CFS quota; not enforced by the local backend).
    cpus: float = _defaults.CPUS
    #: Default wall-clock limit of one `exec` in seconds; `exec(timeout=…)` overrides it per call.
    timeout_s: float = _defaults.TIMEOUT_S
    #: Size of the writable workdir in MiB (Docker tmpfs size; local: RLIMIT_FSIZE per file).
    workdir_mb: int = _defaults.WORKDIR_MB
    #: Bytes kept of each of stdout and stderr; more sets `stdout_truncated`/`stderr_truncated`.
    output_limit_bytes: int = _defaults.OUTPUT_LIMIT_BYTES

    def __post_init__(self) -> None:
        for name in ("memory_mb", "pids", "workdir_mb", "output_limit_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.memory_mb < 16:
            raise ValueError(f"SandboxConfig.memory_mb must be at least 16 (python3 needs it), got {self.memory_mb}")
        if self.cpus <= 0 or self.timeout_s <= 0:
            raise ValueError(f"SandboxConfig.cpus and timeout_s must be > 0, got {self.cpus}, {self.timeout_s}")
        if not self.image:
            raise ValueError("SandboxConfig.image must name an image, e.g. 'looplift-sandbox:py311'")

    def to_dict(self) -> dict[str, object]:
        """The config as plain JSON-able values (written next to runs that used it)."""
        return dataclasses.asdict(self)
