"""The `Sandbox` interface and its typed result, `ExecResult`, shared by every backend.

A sandbox is a place to run untrusted, model-written code: a working directory, limits, and an
`exec` that always returns an `ExecResult` for whatever the code did (non-zero exit, timeout, OOM).
This module holds no backend logic; `_docker.py` and `_local.py` implement it. It also holds the
small output-capping buffer both backends use, so their truncation behaves identically.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from ._config import SandboxConfig
from .errors import SandboxClosedError

__all__ = ["ExecResult", "Sandbox"]


@dataclass(frozen=True)
class ExecResult:
    """What one command did inside a sandbox. Expected failures are values here, never exceptions."""

    #: Exit status; a process killed by signal N reports 128+N (shell convention, both backends).
    #: None when the sandbox killed the command for running past its timeout.
    exit_code: int | None
    #: Captured output, decoded as UTF-8 with invalid bytes replaced by U+FFFD.
    stdout: str
    stderr: str
    #: True when the stream produced more than `output_limit_bytes` and the rest was dropped.
    stdout_truncated: bool
    stderr_truncated: bool
    #: The command ran past its timeout and was killed (with everything it started).
    timed_out: bool
    #: The kernel killed the command for exceeding the memory limit.
    oom_killed: bool
    #: Wall-clock seconds from submitting the command to collecting its result.
    duration_s: float

    @property
    def ok(self) -> bool:
        """True when the command exited 0 on its own (no timeout, no OOM kill)."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def to_dict(self) -> dict[str, object]:
        """The result as plain JSON-able values (the `--json` output of `looplift sandbox exec`)."""
        return {**dataclasses.asdict(self), "ok": self.ok}


class _CappedBuffer:
    """Keeps the first `limit` bytes written to it and counts, but drops, the rest.

    Dropping (instead of stopping to read) matters: a writer blocked on a full pipe would never exit,
    so both backends keep draining the stream after the cap.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._kept = 0
        self.truncated = False

    def write(self, data: bytes) -> None:
        room = self._limit - self._kept
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self._parts.append(data)
            self._kept += len(data)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")


class Sandbox(abc.ABC):
    """An isolated place to run commands, with a working directory that survives between execs.

    Use as a context manager (`with make_sandbox(...) as sb:`) or call `close()`. Relative paths in
    `write_file`/`read_file` and the working directory of `exec` are the sandbox's workdir. A sandbox
    is safe to call from several threads, but calls run one at a time (an internal lock).
    """

    #: Name of the backend ("docker", "local").
    backend: str = ""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._closed = False

    # -- what each backend implements -------------------------------------------------------------

    @abc.abstractmethod
    def exec(self, cmd: list[str], *, timeout: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run `cmd` (argv, no shell) in the workdir and return what it did.

        `timeout` (seconds) defaults to `config.timeout_s`; past it the command and every process it
        started are killed and the result has `timed_out=True`. `stdin` is fed to the command's
        standard input (closed immediately when None).
        """

    @abc.abstractmethod
    def write_file(self, path: str, content: str | bytes) -> None:
        """Write `content` (str is encoded as UTF-8) to `path`, relative to the workdir; creates parents."""

    @abc.abstractmethod
    def read_file(self, path: str) -> bytes:
        """Return the bytes of `path`, relative to the workdir. Raises `SandboxFileError` if missing."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Kill every process the sandbox's commands left behind and empty the workdir."""

    @abc.abstractmethod
    def is_alive(self) -> bool:
        """True when the sandbox can still run commands (a pool never hands out one that is not)."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the backend's resources (called once by `close`)."""

    # -- shared behaviour -------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """A short id for logs and error messages (container id, or workdir name)."""
        return ""

    def run_python(self, code: str, *, timeout: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run `code` with the sandbox's `python3` and return what it did.

        The code goes in as a `-c` argument, so it needs no file in the workdir and no extra
        round trip; `__file__` is therefore undefined, as with `python3 -c`.
        """
        return self.exec(["python3", "-c", code], timeout=timeout, stdin=stdin)

    def close(self) -> None:
        """Stop the sandbox and delete everything in it. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._close()

    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("this sandbox was closed; make a new one with make_sandbox()", sandbox_id=self.id)

    def _timeout(self, timeout: float | None) -> float:
        t = self.config.timeout_s if timeout is None else float(timeout)
        if t <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {t}")
        return t

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {self.id} {state}>"
