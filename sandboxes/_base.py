"""The `Sandbox` interface and its typed result, `ExecResult`, shared by every backend.

A sandbox is a place to run untrusted, model-written code: a working directory, limits, and an
`exec` that always returns an `ExecResult` for whatever the code did (non-zero exit, timeout, OOM).
This module holds the behaviour both backends share, so it is identical on each: argument checks,
the output cap and streaming callback (`_CappedBuffer`), and the file helpers (`write_file`,
`read_file`, `upload_dir`), which run *as commands inside the sandbox*, with the sandbox user's
rights: a symlink planted in the workdir cannot make the host write or read outside it. A backend
implements `_exec` (run argv with bytes on stdin) and its lifecycle; `_docker.py` and `_local.py`.
"""

from __future__ import annotations

import abc
import codecs
import dataclasses
import io
import os
import posixpath
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from ._config import SandboxConfig
from .errors import SandboxClosedError, SandboxFileError

__all__ = ["ExecResult", "OutputCallback", "Sandbox"]

#: `on_output(stream, text)`: called with "stdout" or "stderr" and each decoded chunk as it arrives
#: (only the kept part: nothing past `output_limit_bytes`).
OutputCallback = Callable[[str, str], None]


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
    so both backends keep draining the stream after the cap. With `on_output`, every kept chunk is
    also decoded (incrementally: a UTF-8 sequence split across chunks is not mangled) and passed on;
    an exception from the callback is kept in `callback_error` and raised after the command ends.
    """

    def __init__(self, limit: int, stream: str = "stdout", on_output: OutputCallback | None = None) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._kept = 0
        self.truncated = False
        self._stream = stream
        self._on_output = on_output
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace") if on_output else None
        self.callback_error: BaseException | None = None

    def write(self, data: bytes) -> None:
        room = self._limit - self._kept
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self._parts.append(data)
            self._kept += len(data)
            if self._decoder is not None and self.callback_error is None:
                self._emit(self._decoder.decode(data))

    def _emit(self, text: str) -> None:
        if text and self._on_output is not None:
            try:
                self._on_output(self._stream, text)
            except Exception as e:  # noqa: BLE001 - raised to the caller once the command is over
                self.callback_error = e

    def finish(self) -> None:
        """Flush a trailing partial UTF-8 sequence to the callback (as U+FFFD)."""
        if self._decoder is not None and self.callback_error is None:
            self._emit(self._decoder.decode(b"", final=True))

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")


@dataclass
class _Outcome:
    """What a backend's `_exec` reports: the raw output buffers plus the classification."""

    exit_code: int | None
    stdout: _CappedBuffer
    stderr: _CappedBuffer
    timed_out: bool
    oom_killed: bool
    duration_s: float

    def result(self) -> ExecResult:
        return ExecResult(
            exit_code=None if self.timed_out else self.exit_code,
            stdout=self.stdout.text(),
            stderr=self.stderr.text(),
            stdout_truncated=self.stdout.truncated,
            stderr_truncated=self.stderr.truncated,
            timed_out=self.timed_out,
            oom_killed=self.oom_killed,
            duration_s=self.duration_s,
        )


def check_cmd(cmd: object) -> list[str]:
    """`cmd` as an argv list, or ValueError saying what is wrong with it."""
    if not isinstance(cmd, (list, tuple)) or not cmd or not all(isinstance(a, str) for a in cmd):
        raise ValueError(f"cmd must be a non-empty list of strings (argv, no shell), got {cmd!r}")
    if any("\x00" in a for a in cmd):
        raise ValueError(f"cmd arguments must not contain NUL bytes, got {cmd!r}")
    return list(cmd)


class Sandbox(abc.ABC):
    """An isolated place to run commands, with a working directory that survives between execs.

    Use as a context manager (`with make_sandbox(...) as sb:`) or call `close()`. Relative paths in
    `write_file`/`read_file`/`upload_dir` and the working directory of `exec` are the sandbox's
    workdir; a path that leaves it is refused. A sandbox is safe to call from several threads, but
    calls run one at a time (an internal lock). Nothing a command starts outlives it.
    """

    #: Name of the backend ("docker", "local").
    backend: str = ""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._closed = False

    # -- what each backend implements -------------------------------------------------------------

    @abc.abstractmethod
    def _exec(
        self, cmd: list[str], timeout: float, stdin: bytes | None, limit: int, on_output: OutputCallback | None
    ) -> _Outcome:
        """Run `cmd` in the workdir as the sandbox user, keeping `limit` bytes of each stream.
        Called with the lock held and the sandbox open."""

    @property
    @abc.abstractmethod
    def workdir_path(self) -> str:
        """Absolute path of the workdir as commands inside the sandbox see it."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Kill every process the sandbox's commands left behind and empty the workdir."""

    @abc.abstractmethod
    def is_alive(self) -> bool:
        """True when the sandbox can still run commands (a pool never hands out one that is not)."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the backend's resources (called once by `close`)."""

    # -- commands ---------------------------------------------------------------------------------

    def exec(
        self,
        cmd: list[str],
        *,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run `cmd` (argv, no shell) in the workdir and return what it did.

        `timeout` (seconds) defaults to `config.timeout_s`; past it the command and every process it
        started are killed and the result has `timed_out=True`. `stdin` (str is UTF-8 encoded) is fed
        to the command's standard input, which is closed immediately when None. `on_output(stream,
        text)` receives the output as it is produced (see `OutputCallback`); if it raises, the error
        is raised here once the command has ended.
        """
        argv = check_cmd(cmd)
        t = self._timeout(timeout)
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        with self._lock:
            self._check_open()
            outcome = self._exec(argv, t, data, self.config.output_limit_bytes, on_output)
        for buf in (outcome.stdout, outcome.stderr):
            buf.finish()
            if buf.callback_error is not None:
                raise buf.callback_error
        return outcome.result()

    def run_python(self, code: str, *, timeout: float | None = None, stdin: str | None = None) -> ExecResult:
        """Run `code` with the sandbox's `python3` and return what it did.

        The code goes in as a `-c` argument, so it needs no file in the workdir and no extra
        round trip; `__file__` is therefore undefined, as with `python3 -c`.
        """
        return self.exec(["python3", "-c", code], timeout=timeout, stdin=stdin)

    # -- files: commands in the sandbox, with the sandbox user's rights ---------------------------

    def _path(self, path: str) -> str:
        """`path` (relative to the workdir, or absolute inside it) as an absolute in-sandbox path."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise SandboxFileError(f"invalid path {path!r}", sandbox_id=self.id)
        root = self.workdir_path
        full = posixpath.normpath(posixpath.join(root, path))
        if full != root and not full.startswith(root + "/"):
            raise SandboxFileError(
                f"{path!r} is outside the workdir {root}; use a path relative to it", sandbox_id=self.id
            )
        return full

    def _file_op(self, what: str, target: str, argv: list[str], stdin: bytes | None, limit: int) -> _Outcome:
        with self._lock:
            self._check_open()
            out = self._exec(argv, max(self.config.timeout_s, 30.0), stdin, limit, None)
        if out.exit_code != 0:
            why = "timed out" if out.timed_out else (out.stderr.text().strip() or f"exit code {out.exit_code}")
            raise SandboxFileError(
                f"could not {what} {target}: {why} (only the workdir {self.workdir_path} is writable; "
                f"it holds {self.config.workdir_mb} MiB)",
                sandbox_id=self.id,
            )
        return out

    def write_file(self, path: str, content: str | bytes) -> None:
        """Write `content` (str is encoded as UTF-8) to `path` in the workdir; creates parents."""
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        target = self._path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        self._file_op(f"write {len(data)} bytes to", target, ["sh", "-c", script, "sh", target], data, 4096)

    def read_file(self, path: str) -> bytes:
        """Return the bytes of `path` in the workdir. Raises `SandboxFileError` if it cannot be read."""
        target = self._path(path)
        limit = self.config.workdir_mb * 1024 * 1024
        return self._file_op("read", target, ["cat", "--", target], None, limit).stdout.getvalue()

    def upload_dir(self, src: str | os.PathLike[str], dest: str = ".") -> list[str]:
        """Copy the local directory `src` into `dest` (inside the workdir); returns the paths written.

        Regular files and directories are copied with their permission bits (no owners). A symlink is
        copied as the file it points to when that stays inside `src`; one pointing outside `src` is
        refused (`SandboxFileError`), as is a `dest` outside the workdir. The files travel as one tar
        stream, unpacked in the sandbox by the sandbox user.
        """
        root = Path(src)
        if not root.is_dir():
            raise SandboxFileError(f"upload_dir: {str(root)!r} is not a directory", sandbox_id=self.id)
        target = self._path(dest)
        tar_bytes, names = _pack_dir(root, self.id)
        script = 'mkdir -p -- "$1" && tar -x -f - -C "$1" --no-same-owner --no-same-permissions --delay-directory-restore'
        self._file_op(f"upload {len(names)} files to", target, ["sh", "-c", script, "sh", target], tar_bytes, 4096)
        return [posixpath.join(target, n) for n in names]

    # -- snapshots: the workdir as one tar stream, out and back in ----------------------------------

    def snapshot(self) -> bytes:
        """The whole workdir as an uncompressed tar stream (relative names, symlinks kept as links).

        Made by `tar` inside the sandbox as the sandbox user, so it holds exactly what the commands
        can see. What lives outside the workdir (Docker's /tmp, running processes) is not in it: a
        snapshot is taken between commands, when nothing runs. Raises `SandboxFileError` when the
        stream would exceed twice the workdir's size limit.
        """
        root = self.workdir_path
        limit = 2 * self.config.workdir_mb * 1024 * 1024 + (1 << 20)
        # The workdir's entries, not ".": restoring "." would chmod the workdir itself, which on Docker is a
        # root-owned tmpfs the sandbox user may write into but not chmod.
        script = 'cd "$1" && find . -mindepth 1 -maxdepth 1 -printf "%P\\0" | tar -c -f - --numeric-owner --null -T -'
        out = self._file_op("snapshot", root, ["sh", "-c", script, "sh", root], None, limit)
        if out.stdout.truncated:
            raise SandboxFileError(f"snapshot of {root} is larger than {limit} bytes", sandbox_id=self.id)
        return out.stdout.getvalue()

    def restore(self, snapshot: bytes) -> None:
        """Make the workdir exactly the `snapshot` (from `snapshot()`, this sandbox's or another's).

        The sandbox is `reset()` first (every process killed, the workdir emptied), then the tar is
        unpacked by the sandbox user; nothing in it can land outside the workdir.
        """
        self.reset()
        root = self.workdir_path
        argv = ["tar", "-x", "-f", "-", "-C", root, "--no-same-owner", "--no-same-permissions",
                "--delay-directory-restore"]
        self._file_op(f"restore a {len(snapshot)}-byte snapshot into", root, argv, bytes(snapshot), 4096)

    # -- shared behaviour -------------------------------------------------------------------------

    @property
    def id(self) -> str:
        """A short id for logs and error messages (container id, or workdir name)."""
        return ""

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


def _pack_dir(root: Path, sandbox_id: str) -> tuple[bytes, list[str]]:
    """Tar the tree under `root` (relative names only; symlinks resolved and kept inside `root`)."""
    real_root = root.resolve()
    buf = io.BytesIO()
    names: list[str] = []
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                full = Path(dirpath, name)
                arcname = posixpath.normpath(posixpath.join(rel_dir.replace(os.sep, "/"), name))
                real = full.resolve()
                if real != real_root and real_root not in real.parents:
                    raise SandboxFileError(
                        f"upload_dir: {arcname!r} is a symlink to {str(real)!r}, outside {str(root)!r}; refused",
                        sandbox_id=sandbox_id,
                    )
                if real.is_dir():
                    continue  # a symlink to a directory inside root: its files are uploaded from there
                info = tar.gettarinfo(str(real), arcname=arcname)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(real, "rb") as f:
                    tar.addfile(info, f)
                names.append(arcname)
    return buf.getvalue(), names
