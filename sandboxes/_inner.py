"""The in-container runner of the Docker backend: the container's only long-lived process.

`DockerSandbox` starts it as `python3 -c <this file's source>` under docker-init, keeps the container's
stdin/stdout attached, and sends it one request at a time. Running commands through it instead of
`docker exec` removes the engine round trips (exec create, start, inspect; runc setns) from every call:
a warm `python3 -c pass` costs one fork+exec here instead of ~50 ms of engine work per exec.

Standard library only, Python 3.8+: it runs with the image's python3, not the host's.

Privileges. It runs as uid 0 *inside* the container with only CAP_SETUID, CAP_SETGID, CAP_SETPCAP and
CAP_KILL (every other capability is dropped, no-new-privileges is set, the root filesystem is
read-only). Each command runs in a forked child that first clears its capability bounding set, then
becomes uid/gid 65534 with no supplementary groups, a new session and only fds 0-2 open, then execs.
A command therefore holds no capability and cannot gain one (no-new-privileges blocks setuid binaries
and file capabilities), and, being another uid, cannot signal, ptrace or read the memory or fds of
this runner: it cannot forge a result or tamper with the next command's.

Cleanup. `kill(-1, SIGKILL)` from this runner reaches every process in the container except itself
and docker-init (pid 1), i.e. everything commands started. It runs after every command (nothing a
command started outlives it: no daemons, no orphans), at its timeout, and on `reset`; it needs no
fork, so it works while a fork bomb holds every pid. Orphans' zombies are reaped by docker-init.

Reset: every place a command can leave state goes back to empty, or the container is replaced. With a
read-only root filesystem those places are (found with `find / -writable` and the rw mounts of
/proc/self/mounts, as the sandbox user; `tests/test_sandboxes.py` repeats that search): the tmpfs
mounts `SCRATCH` (/work, /tmp, and Docker's own /dev/shm and /dev/mqueue, POSIX shared memory and
message queues), and the container's private IPC namespace (System V shared memory, semaphores and
message queues: no file, listed in /proc/sysvipc). Processes die by `kill_all`. The masked /proc
files (/proc/keys, /proc/timer_list) are /dev/null; keyrings are out of reach (Docker's seccomp
profile refuses add_key/keyctl); the network namespace has only `lo`. A reset that leaves anything
behind (`_leftovers`) answers `ok: false`, and the host replaces the container.

Wire format. Requests on stdin: 4-byte big-endian length + JSON. Replies on stdout, each a frame of
1 type byte + 4-byte big-endian length + payload: `o`/`e` a chunk of the command's stdout/stderr (at
most `limit + 1` bytes of each stream are forwarded, so the host can tell truncation; the rest is read
and dropped so the command never blocks on a full pipe), `x` the JSON result that ends a request.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import json
import os
import selectors
import signal
import struct
import sys
import time
from typing import Any, Callable, Dict

UID = GID = 65534  # sandboxes._defaults.SANDBOX_UID (this file runs alone: no imports of ours)
WORKDIR = "/work"
#: Every writable place in the container (see "Reset" above); each is emptied by `reset`.
SCRATCH = ("/work", "/tmp", "/dev/shm", "/dev/mqueue")
_SYSV = ("shm", "sem", "msg")
_IPC_RMID = 0
_OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
_PR_CAPBSET_DROP = 24
_CHUNK = 1 << 16
_libc = ctypes.CDLL(None, use_errno=True)


def _become_sandbox_user() -> None:
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the kernel's last capability
    os.setgroups([])
    os.setresgid(GID, GID, GID)
    os.setresuid(UID, UID, UID)


def _oom_kills() -> int:
    """The memory cgroup's OOM-kill counter (v2 `memory.events`, v1 `memory.oom_control`), -1 if unknown."""
    for path in _OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


def kill_all() -> None:
    """SIGKILL every process in the container but this one and pid 1."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing to kill


def _fork() -> int:
    while True:
        try:
            return os.fork()
        except BlockingIOError:  # the pids limit is full: free it and retry
            kill_all()
            time.sleep(0.001)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            try:
                os.chmod(path, 0o700)  # a dir its owner made unreadable (chmod 000) would otherwise stay
            except OSError:
                pass
            for name in os.listdir(path):
                _remove(os.path.join(path, name))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass  # already gone


def _sysv_ids(kind: str) -> list[int]:
    """The ids of the System V IPC objects of `kind` ("shm", "sem", "msg") in this IPC namespace."""
    try:
        with open("/proc/sysvipc/" + kind) as f:
            return [int(line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
    except (OSError, ValueError, IndexError):
        return []


def _remove_sysv() -> None:
    for ident in _sysv_ids("shm"):
        _libc.shmctl(ident, _IPC_RMID, None)
    for ident in _sysv_ids("sem"):
        _libc.semctl(ident, 0, _IPC_RMID)
    for ident in _sysv_ids("msg"):
        _libc.msgctl(ident, _IPC_RMID, None)


def _leftovers() -> list[str]:
    """What a reset did not remove: entries of the scratch dirs and System V IPC objects (empty when clean)."""
    left = []
    for root in SCRATCH:
        try:
            left += [os.path.join(root, name) for name in os.listdir(root)]
        except FileNotFoundError:
            continue  # an image without that mount
        except OSError as e:
            left.append("%s (%s)" % (root, e))
    for kind in _SYSV:
        left += ["sysv %s %d" % (kind, i) for i in _sysv_ids(kind)]
    return left


def reset() -> Dict[str, Any]:
    """Kill everything commands started, then, as the sandbox user in a child, empty every writable place
    (`SCRATCH`, System V IPC). `ok` is False when something stayed: the host then replaces the container."""
    kill_all()
    pid = _fork()
    if pid == 0:
        try:
            _become_sandbox_user()
            for root in SCRATCH:
                try:
                    names = os.listdir(root)
                except OSError:
                    continue
                for name in names:
                    _remove(os.path.join(root, name))
            _remove_sysv()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    left = _leftovers()
    return {"ok": not left, "left": left[:20]}


def _spawn(req: Dict[str, Any], out_w: int, err_w: int, in_r: int) -> int:
    argv = req["argv"]
    pid = _fork()
    if pid != 0:
        return pid
    try:
        _become_sandbox_user()
        os.setsid()
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)
        os.chdir(req.get("cwd") or WORKDIR)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.execvpe(argv[0], argv, req["env"])
    except FileNotFoundError:
        os.write(2, ("%s: command not found\n" % argv[0]).encode("utf-8", "replace"))
        os._exit(127)
    except BaseException as e:  # noqa: BLE001 - e.g. permission denied: a failed start, like a shell's 126
        try:
            os.write(2, ("%s: %s\n" % (argv[0], getattr(e, "strerror", None) or e)).encode("utf-8", "replace"))
        finally:
            os._exit(126)
    os._exit(126)


def run(req: Dict[str, Any], send: Callable[[bytes, bytes], None]) -> Dict[str, Any]:
    """Run one command; stream its output through `send(kind, bytes)`; return the result dict."""
    limit = int(req["limit"]) + 1
    timeout = float(req["timeout"])
    data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else b""
    oom_before = _oom_kills()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe()
    t0 = time.monotonic()
    pid = _spawn(req, out_w, err_w, in_r)
    for fd in (out_w, err_w, in_r):
        os.close(fd)
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    forwarded = {out_r: 0, err_r: 0}
    kinds = {out_r: b"o", err_r: b"e"}
    for fd in forwarded:
        sel.register(fd, selectors.EVENT_READ)
    sent = 0
    if data:
        os.set_blocking(in_w, False)
        sel.register(in_w, selectors.EVENT_WRITE)
    else:
        os.close(in_w)
        in_w = -1
    deadline = t0 + timeout
    timed_out = False
    status: int | None = None
    while True:
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                kill_all()  # nothing the command started outlives it; its pipes then reach EOF
                if pidfd is not None:
                    sel.unregister(pidfd)
            elif time.monotonic() >= deadline:
                timed_out = True
                kill_all()
                continue  # reaped on the next turn
        if status is not None and not forwarded:
            break
        if status is None:
            wait = max(deadline - time.monotonic(), 0.0)
            wait = wait if pidfd is not None else min(wait, 0.01)
        else:
            wait = 1.0
        events = sel.select(wait)
        if not events and status is not None:
            break  # output held open past the kill by a process out of reach (not expected)
        for key, _ in events:
            fd = key.fd
            if fd == pidfd:
                continue  # the command exited; reaped at the top of the loop
            if fd == in_w:
                try:
                    sent += os.write(in_w, data[sent : sent + _CHUNK])
                except BlockingIOError:
                    continue
                except OSError:  # the command closed its stdin
                    sent = len(data)
                if sent >= len(data):
                    sel.unregister(in_w)
                    os.close(in_w)
                    in_w = -1
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                sel.unregister(fd)
                os.close(fd)
                del forwarded[fd]
                continue
            room = limit - forwarded[fd]
            if room > 0:
                send(kinds[fd], chunk[:room])
                forwarded[fd] += min(room, len(chunk))
    for open_fd in [*forwarded, in_w, pidfd]:
        if open_fd is not None and open_fd >= 0:
            os.close(open_fd)
    sel.close()
    duration = time.monotonic() - t0
    code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    oom = code == 128 + signal.SIGKILL and not timed_out and _oom_kills() > oom_before >= 0
    return {"exit_code": None if timed_out else code, "timed_out": timed_out, "oom_killed": oom, "duration_s": duration}


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def main() -> None:
    out = sys.stdout.buffer

    def send(kind: bytes, payload: bytes) -> None:
        out.write(kind + struct.pack(">I", len(payload)) + payload)
        out.flush()

    os.umask(0o022)
    while True:
        head = _read_exact(0, 4)
        body = None if head is None else _read_exact(0, struct.unpack(">I", head)[0])
        if body is None:
            return  # the host closed the connection: the container is being removed
        try:
            req: Dict[str, Any] = json.loads(body)
            op = req.get("op")
            if op == "exec":
                result = run(req, send)
            elif op == "reset":
                result = reset()
            elif op == "ping":
                result = {"ok": True}
            else:
                result = {"error": "unknown op %r" % (op,)}
        except Exception as e:  # noqa: BLE001 - report it and stay up for the next request
            result = {"error": "%s: %s" % (type(e).__name__, e)}
        send(b"x", json.dumps(result).encode())


if __name__ == "__main__":
    main()
