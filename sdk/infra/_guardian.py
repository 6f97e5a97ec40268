"""The guardian behind `spawn_tied`: a tiny stdlib-only process that ties a command to the process that
started it. `spawn_tied` runs this file by path (`python -I -S _guardian.py ...`), so it starts in
~20 ms and ~10 MB and imports nothing of looplift:

    python -I -S _guardian.py LIFELINE_FD PARENT_PID GRACE_S -- ARGV...

It starts ARGV in a new session (so ARGV and everything it forks share one process group, and no
terminal signal reaches them), reports `pid N` (or `error ERRNO MESSAGE`) on the lifeline, and stays
ARGV's parent. It ends ARGV's group -- SIGTERM, up to GRACE_S seconds, then SIGKILL -- when:

  * the lifeline reaches EOF. It is one end of a socket pair whose other end only the parent holds, so
    the kernel closes it when the parent process ends, however it ends (SIGKILL included);
  * PR_SET_PDEATHSIG (SIGUSR1 here) arrives and `getppid()` is no longer PARENT_PID: the backup for a
    lifeline end that a fork of the parent still holds. The kernel also sends that signal when the
    *thread* that spawned the guardian exits; `getppid()` is then unchanged and the signal is ignored,
    so a command started from a worker thread outlives the thread, as it must;
  * SIGTERM (the parent's `stop()`), or SIGUSR2 (the parent's `kill()`: no grace).

When ARGV exits on its own, what is left of its group gets the same treatment. The guardian then exits
the way ARGV did (same exit code, or killed by the same signal), so the parent sees ARGV's status.
It is a child subreaper: a descendant orphaned by a death inside the group (vLLM's engine core when its
API server dies) is reparented to it and reaped, so "the group is empty" really means empty. ARGV itself
gets PR_SET_PDEATHSIG=SIGKILL, so even a SIGKILL of the guardian does not leave ARGV running.

Deliberately not handled: a descendant that leaves the group (setsid) while its own parent lives on
(nothing we start does that), and grandchildren after a SIGKILL of the guardian itself (the lifeline
covers the parent's death; the guardian is not expected to be killed on its own).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: After SIGKILL, how long to wait for the group to be reaped before giving up on it.
KILL_WAIT_S = 10.0


def prctl(option: int, arg: int) -> bool:
    """`prctl(option, arg)` through libc; False where there is no prctl (not Linux) or it fails."""
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send `sig` to this process when its parent (thread) exits."""
    return prctl(PR_SET_PDEATHSIG, int(sig))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Guardian:
    def __init__(self, lifeline: socket.socket, parent: int, grace_s: float) -> None:
        self.lifeline = lifeline
        self.parent = parent
        self.grace_s = grace_s
        self.pending: list[int] = []  # signals received, in order
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(s, lambda signum, _frame: self.pending.append(signum))
        for s in (signal.SIGINT, signal.SIGHUP):  # we are in our own session; only our parent decides
            signal.signal(s, signal.SIG_IGN)
        self.lifeline_open = True
        self.child_pid = 0
        self.status: int | None = None  # the command's wait status, once reaped
        self.kill_now = False

    def reap(self) -> None:
        """Reap every finished child (the command, and orphans reparented to us); note the command's status."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child_pid:
                self.status = status

    def wait_event(self, timeout: float) -> str | None:
        """Sleep until a signal, lifeline activity or `timeout`; return why we must stop, if we must."""
        life = self.lifeline.fileno()
        watched = [self.wake_r, life] if self.lifeline_open else [self.wake_r]
        try:
            ready, _, _ = select.select(watched, [], [], timeout)
        except InterruptedError:
            ready = []
        if self.wake_r in ready:
            os.read(self.wake_r, 4096)
        reason = None
        if life in ready:
            try:
                self.lifeline_open = bool(self.lifeline.recv(4096))
            except OSError:
                self.lifeline_open = False
            if not self.lifeline_open:
                reason = "lifeline"
        while self.pending:
            signum = self.pending.pop(0)
            if signum == signal.SIGTERM:
                reason = reason or "terminate"
            elif signum == signal.SIGUSR2:
                self.kill_now = True
                reason = "kill"
            elif signum == signal.SIGUSR1 and os.getppid() != self.parent:
                reason = reason or "parent died"
        return reason

    def end_group(self, grace_s: float) -> None:
        """SIGTERM the command's group, wait up to `grace_s` (SIGUSR2 cuts it short), then SIGKILL."""
        pgid = self.child_pid
        self.reap()
        if _group_alive(pgid) and not self.kill_now:
            _killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while not self.kill_now and time.monotonic() < deadline:
                self.reap()
                if not _group_alive(pgid):
                    break
                self.wait_event(min(0.1, max(0.0, deadline - time.monotonic())))
        deadline = time.monotonic() + KILL_WAIT_S
        while _group_alive(pgid) and time.monotonic() < deadline:
            _killpg(pgid, signal.SIGKILL)
            self.reap()
            time.sleep(0.02)
        self.reap()

    def run(self, argv: list[str]) -> int:
        set_parent_death_signal(signal.SIGUSR1)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        if os.getppid() != self.parent:
            return 1  # the parent died before we could watch it: start nothing
        me = os.getpid()

        def child_setup() -> None:  # runs in the forked child, before exec (we have no threads)
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # SIG_IGN would survive exec
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            set_parent_death_signal(signal.SIGKILL)
            if os.getppid() != me:
                os._exit(1)

        try:
            child = subprocess.Popen(argv, start_new_session=True, preexec_fn=child_setup)  # noqa: PLW1509
        except OSError as e:
            self.lifeline.sendall(f"error {e.errno or 0} {e.strerror or e}\n".encode())
            return 127
        self.child_pid = child.pid
        self.lifeline.sendall(f"pid {child.pid}\n".encode())
        reason = None
        while reason is None:
            self.reap()
            if self.status is not None:
                break
            reason = self.wait_event(1.0)
        self.end_group(0.0 if self.kill_now else self.grace_s)
        child.returncode = 0  # reaped by us, not by Popen: keep its finalizer quiet
        return self._mirror(self.status)

    @staticmethod
    def _mirror(status: int | None) -> int:
        """Exit the way the command did: its code, or death by its signal."""
        if status is None:
            return 1
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            signal.set_wakeup_fd(-1)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            time.sleep(1.0)  # the signal is delivered on the way out of kill(); if it is ignored, fall through
            return 128 + sig
        return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if len(argv) < 6 or argv[4] != "--":
        print("usage: _guardian.py LIFELINE_FD PARENT_PID GRACE_S -- ARGV...", file=sys.stderr)
        return 2
    lifeline = socket.socket(fileno=int(argv[1]))
    return _Guardian(lifeline, int(argv[2]), float(argv[3])).run(argv[5:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
