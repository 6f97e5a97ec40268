"""Child processes that die with the process that started them: `spawn_tied(argv)`.

A plain `Popen` child outlives a parent killed with SIGKILL, and `PR_SET_PDEATHSIG` alone is not enough:
it reaches only the direct child (vLLM's API server, not its engine core and worker), and the kernel
sends it when the *thread* that spawned the child exits, which would kill a server restarted from a
monitor thread. So `spawn_tied` starts a tiny guardian (`_guardian.py`, stdlib only) that starts the
command in its own process group and ends that whole group -- SIGTERM, a grace period, then SIGKILL --
when this process ends (the guardian watches a socket only we hold; the kernel closes it however we
die), when `stop()` asks, or when the command itself exits and leaves children behind.

Guarantees, and their limits:
  * the command and everything it forks (in its group) are gone within `grace_s` + ~1 s of this process
    ending, by any signal, including SIGKILL;
  * `stop()` escalates from SIGTERM to SIGKILL after its grace period (vLLM ignores SIGTERM while it
    loads, and never exits if it gets it at the wrong moment);
  * dropping the last reference to a running `TiedProcess` closes its lifeline and so stops it: keep
    the handle for as long as the command should run;
  * a fork of this process that does not exec (multiprocessing's fork start method) keeps the lifeline
    open until it exits; the guardian's PR_SET_PDEATHSIG backup still notices the parent's death.

Deliberately not here: restarts, health checks and logs (the caller's), and Windows/macOS (the lifeline
works there, the PDEATHSIG and subreaper backups are Linux-only).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Optional, Union

from ._guardian import _killpg

_GUARDIAN = str(Path(__file__).resolve().with_name("_guardian.py"))
#: How long `spawn_tied` waits for the guardian to report the command's pid.
_REPORT_TIMEOUT_S = 60.0
#: After `stop()` asked the guardian to SIGKILL the group, how long it waits for the guardian to exit.
_KILL_WAIT_S = 15.0

File = Union[None, int, IO[Any]]


class TiedProcess:
    """A command started by `spawn_tied`. Like a `Popen`: `pid`, `poll()`, `wait()`, `returncode`; plus
    `stop(grace_s)`, which ends the command's whole process group and escalates to SIGKILL."""

    def __init__(self, guardian: subprocess.Popen[bytes], lifeline: socket.socket, pid: int, grace_s: float,
                 argv: list[str]) -> None:
        self._guardian = guardian
        self._lifeline: Optional[socket.socket] = lifeline
        #: The command's pid, which is also its process group id.
        self.pid = pid
        #: The guardian's grace period between SIGTERM and SIGKILL.
        self.grace_s = grace_s
        self.args = argv

    @property
    def guardian_pid(self) -> int:
        """The guardian's pid (the command's parent)."""
        return self._guardian.pid

    @property
    def returncode(self) -> Optional[int]:
        """The command's exit code, `-N` if a signal N ended it, None while it runs."""
        return self._guardian.returncode

    def poll(self) -> Optional[int]:
        """The return code if the command has ended (its whole group is gone by then), else None."""
        code = self._guardian.poll()
        if code is not None:
            self._close_lifeline()
        return code

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the command (and the rest of its group) to end; `subprocess.TimeoutExpired` on timeout."""
        code = self._guardian.wait(timeout)
        self._close_lifeline()
        return code

    def terminate(self) -> None:
        """Ask for a graceful end: SIGTERM to the group now, SIGKILL after the guardian's grace period."""
        self._signal_guardian(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the command's whole group now."""
        self._signal_guardian(signal.SIGUSR2)

    def stop(self, grace_s: Optional[float] = None) -> Optional[int]:
        """End the command's group: SIGTERM, then SIGKILL after `grace_s` (default and at most: the grace
        given to `spawn_tied`). Idempotent; returns the return code."""
        grace = self.grace_s if grace_s is None else min(grace_s, self.grace_s)
        if self.poll() is None:
            self.terminate()
            try:
                self._guardian.wait(grace + 1.0)
            except subprocess.TimeoutExpired:
                self.kill()
                try:
                    self._guardian.wait(_KILL_WAIT_S)
                except subprocess.TimeoutExpired:  # the guardian itself is stuck: do its job from here
                    _killpg(self.pid, signal.SIGKILL)
                    self._guardian.kill()
                    self._guardian.wait()
        self._close_lifeline()
        return self.returncode

    def _signal_guardian(self, sig: int) -> None:
        if self._guardian.poll() is None:
            try:
                self._guardian.send_signal(sig)
            except ProcessLookupError:
                pass

    def _close_lifeline(self) -> None:
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None

    def __enter__(self) -> "TiedProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"TiedProcess(pid={self.pid}, returncode={self.returncode}, args={self.args[:3]}...)"


def _read_report(sock: socket.socket, timeout: float) -> str:
    """The guardian's first line (`pid N` or `error ERRNO MESSAGE`); '' if it ended without one."""
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return ""
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(256)
        except (socket.timeout, OSError):
            return ""
        if not chunk:
            return ""
        buf += chunk
    sock.settimeout(None)
    return buf.split(b"\n", 1)[0].decode("utf-8", "replace")


def spawn_tied(
    argv: Sequence[str],
    *,
    grace_s: float = 10.0,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[Union[str, "os.PathLike[str]"]] = None,
    stdin: File = None,
    stdout: File = None,
    stderr: File = None,
) -> TiedProcess:
    """Start `argv` so that it (and every process it forks) ends when this process ends, however it ends.

    The command runs in a new session and process group under a guardian process; `grace_s` is how long
    it gets between SIGTERM and SIGKILL. `env`, `cwd` and the three streams are as for `Popen`, except
    `PIPE` (the guardian sits between us and the command: pass a file, an fd or `DEVNULL`). Raises
    `OSError` when the command cannot be started (e.g. `FileNotFoundError`), like `Popen`. Safe to call
    from any thread: the command outlives the thread that started it, not the process.
    """
    if subprocess.PIPE in (stdin, stdout, stderr):
        raise ValueError("spawn_tied does not support subprocess.PIPE; pass a file, an fd or subprocess.DEVNULL")
    argv = [os.fspath(a) for a in argv]
    ours, theirs = socket.socketpair()
    guardian = None
    try:
        guardian = subprocess.Popen(
            [sys.executable, "-I", "-S", _GUARDIAN, str(theirs.fileno()), str(os.getpid()), repr(float(grace_s)),
             "--", *argv],
            pass_fds=(theirs.fileno(),), start_new_session=True, env=env, cwd=cwd,
            stdin=stdin, stdout=stdout, stderr=stderr,
        )
        theirs.close()
        report = _read_report(ours, _REPORT_TIMEOUT_S)
        kind, _, rest = report.partition(" ")
        if kind == "pid":
            return TiedProcess(guardian, ours, int(rest), float(grace_s), argv)
        guardian.kill()
        guardian.wait()
        ours.close()
        if kind == "error":
            errno_text, _, message = rest.partition(" ")
            raise OSError(int(errno_text), message, argv[0])
        raise OSError(f"the guardian for {argv[0]!r} exited with code {guardian.returncode} before starting it")
    except BaseException:  # a signal or an error while starting: nothing may stay behind
        theirs.close()
        ours.close()  # the guardian sees EOF and ends the command
        if guardian is not None and guardian.poll() is None:
            guardian.send_signal(signal.SIGUSR2)
            try:
                guardian.wait(_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                guardian.kill()
        raise


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> bool:
    """Make the calling process receive `sig` when its parent ends; for processes that a library starts
    for us (uvicorn's workers), where `spawn_tied` cannot be used. Exits at once (code 1) if `parent_pid`
    is no longer our parent, i.e. the parent died before this call. Linux only (returns False elsewhere).

    The kernel sends `sig` when the parent *thread* that forked us exits: use it only for children that a
    parent's main thread (or a thread living as long as the parent) starts."""
    from ._guardian import set_parent_death_signal

    ok = set_parent_death_signal(sig)
    if os.getppid() != parent_pid:
        os._exit(1)
    return ok
