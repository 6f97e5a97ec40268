"""`LocalSandbox`: run commands as host subprocesses, with the isolation the host offers without Docker.

The fallback where no Docker engine answers (dev laptops, CI without Docker). What it does:

  * a private temporary workdir, a cleared environment (PATH, plus HOME/TMPDIR pointing at the workdir
    so tools do not write into the real home), a new session, so the timeout kills the whole group;
  * rlimits through util-linux `prlimit`: address space (memory_mb), CPU seconds (timeout + 1),
    file size (workdir_mb), open files, no core dumps;
  * when util-linux `unshare` works here (detected once per process): a new network namespace (only
    a down `lo`, so no network at all), a new pid namespace (the command is pid 1 there; when it exits
    or is killed, the kernel kills everything it started) and a private /proc;
  * when running as root: the command runs as uid/gid 65534 via util-linux `setpriv`, without
    capabilities and with no-new-privileges.
  * with that namespace (its `--mount-proc` makes a mount namespace too) and a new IPC namespace, each
    command first gets, from a small `sh` run as (namespace) root before the user drop:
      - the host hidden: an empty read-only tmpfs over /root, /home, the calling user's home,
        $LOOPLIFT_HOME, the project checkout (the directory holding this package), the running
        interpreter's prefix (a venv) and the site-packages/dist-packages of both it and the sandbox's
        `python3` (`hidden_paths()`): installed packages and their data (e.g. HumanEval's reference
        solutions) are not there to find. python3's standard library stays, and so does the rest of /
        (/usr, /etc, /opt, /srv, ...: read-only to uid 65534 but readable);
      - fresh, empty scratch: a new tmpfs over /tmp, /var/tmp, /dev/shm and /run/lock (the world-writable
        places of a Debian host) and a new mqueue over /dev/mqueue, gone when the command ends, so nothing
        but the workdir carries from one command, or one episode, to the next (the workdir, under /tmp, is
        bound back in from the shell's working directory).
    Without a mount namespace none of this applies (see LIMITATIONS).

What it does not do is in `LIMITATIONS`; use the Docker backend for untrusted code in production.
RLIMIT_NPROC is set only when commands run as uid 65534: the limit counts every process of the *user*,
so for the calling user it would break unrelated work (or, as root, do nothing).
"""

from __future__ import annotations

import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from . import _defaults
from ._base import OutputCallback, Sandbox, _CappedBuffer, _Outcome
from ._config import SandboxConfig
from .errors import SandboxStartError

__all__ = ["LIMITATIONS", "LocalSandbox", "local_isolation"]

LIMITATIONS = """\
The local backend is NOT a security boundary; task families refuse it for training, gates and model
policies unless asked (`--sandbox local --unsafe`). It does not isolate:
- the filesystem: with a mount namespace, the homes, the checkout, the venv and site-packages are hidden
  and /tmp, /var/tmp, /dev/shm, /run/lock are fresh per command, but the rest of the host's files (/usr,
  /etc, /opt, /srv, other mounts) stays readable to the command's user, and any other place that user
  may write keeps what it writes; without a mount namespace (no working `unshare`) the command sees
  every file its user may read and writes to world-writable places outside its workdir;
- the kernel: it shares the host kernel and all its syscalls (no seccomp filter);
- memory as a whole: RLIMIT_AS caps each process's address space, not the sum of its children, and
  there is no OOM detection beyond Python's MemoryError in stderr;
- process count: when it runs as uid 65534 (the host runs it as root), RLIMIT_NPROC caps the
  processes of that uid host-wide, shared by every local sandbox (and anything else running as
  65534); otherwise there is no pids limit, so a fork bomb can load the host until the timeout kills
  it (with a pid namespace the kill reaches every process; without one, processes that leave the
  session survive);
- disk space: RLIMIT_FSIZE caps each file at workdir_mb, not the workdir's total, so many files can
  fill the host's disk;
- CPU share: RLIMIT_CPU bounds each process's CPU seconds, there is no quota across processes;
- IPC and abstract unix sockets: shared with the host unless the namespaces below apply;
- the network, unless `unshare` works on this machine (see `local_isolation()`); without it the
  command has the host's full network;
- the user: without root it runs as the calling user, with that user's files and permissions.
"""


@dataclass(frozen=True)
class Isolation:
    """What this host lets the local backend add around each command (detected once)."""

    #: argv prefix that enters new namespaces (empty when `unshare` is unusable here).
    unshare: tuple[str, ...]
    #: argv prefix that drops to uid/gid 65534 (empty unless running as root with setpriv).
    drop_user: tuple[str, ...]
    #: Path of util-linux prlimit, or None (then rlimits are set in a preexec_fn).
    prlimit: str | None
    #: Directories hidden under an empty tmpfs in each command's mount namespace (empty without one).
    hidden: tuple[str, ...] = ()

    @property
    def mount_namespace(self) -> bool:
        return "--mount-proc" in self.unshare

    @property
    def network_isolated(self) -> bool:
        return "--net" in self.unshare

    @property
    def pid_namespace(self) -> bool:
        return "--pid" in self.unshare

    def describe(self) -> str:
        parts = [
            "no network (net namespace)" if self.network_isolated else "HOST NETWORK (unshare unavailable)",
            "pid namespace" if self.pid_namespace else "process group only",
            f"host hidden ({len(self.hidden)} dirs), fresh /tmp" if self.mount_namespace else "HOST FILES VISIBLE",
            "runs as uid 65534" if self.drop_user else f"runs as uid {os.geteuid()}",
            "rlimits via prlimit" if self.prlimit else "rlimits via preexec_fn",
        ]
        return ", ".join(parts)


_isolation: Isolation | None = None
_isolation_lock = threading.Lock()

_UNSHARE_CANDIDATES: tuple[tuple[str, ...], ...] = (
    ("--net", "--ipc", "--pid", "--fork", "--mount-proc", "--kill-child"),  # root
    ("--user", "--map-root-user", "--net", "--ipc", "--pid", "--fork", "--mount-proc", "--kill-child"),  # userns
    ("--user", "--map-root-user", "--net"),
)
#: World-writable places of a host that each command gets fresh and empty (a new tmpfs; /dev/mqueue a new mqueue).
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
#: The setup each command runs in its new mount namespace before the user drop: $1 the workdir, then the paths
#: to hide up to "--", then the command. The shell starts in the workdir, so once a fresh tmpfs covers /tmp its
#: cwd still is the real workdir, which `/proc/self/cwd` reaches; it is bound back at its own path (not
#: canonicalized: mount(8) would turn the link into the path, which now names the empty tmpfs).
_SETUP = r"""set -e
w=$1; shift
while [ "$1" != "--" ]; do mount -t tmpfs -o ro,nosuid,nodev,mode=755,size=4k looplift-hidden "$1"; shift; done
shift
for d in %(scratch)s; do
  [ -d "$d" ] && [ ! -L "$d" ] && mount -t tmpfs -o nosuid,nodev,mode=1777,size=%(mb)dm looplift-scratch "$d"
done
[ -d /dev/mqueue ] && mount -t mqueue -o nosuid,nodev,noexec looplift-mqueue /dev/mqueue || true
mkdir -p "$w"
mount --no-canonicalize --bind /proc/self/cwd "$w"
cd "$w"
exec "$@"
"""


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def local_isolation() -> Isolation:
    """Detect (once per process) which namespaces, user drop and rlimit tool work on this host."""
    global _isolation
    with _isolation_lock:
        if _isolation is not None:
            return _isolation
        unshare: tuple[str, ...] = ()
        exe = shutil.which("unshare")
        true = shutil.which("true") or "/bin/true"
        if exe:
            for flags in _UNSHARE_CANDIDATES:
                if _works([exe, *flags, "--", true]):
                    unshare = (exe, *flags, "--")
                    break
        drop: tuple[str, ...] = ()
        setpriv = shutil.which("setpriv")
        if os.geteuid() == 0 and setpriv:
            uid = _defaults.SANDBOX_UID
            cand = (setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--")
            if _works([*unshare, *cand, true]):
                drop = cand
        hidden: tuple[str, ...] = ()
        if "--mount-proc" in unshare:
            hidden = hidden_paths()
            # Only if the setup works here (mount(8) present, tmpfs allowed): else the namespaces alone.
            probe = [*unshare, "sh", "-c", _SETUP % {"scratch": " ".join(SCRATCH), "mb": 1}, "sh", "/tmp", *hidden,
                     "--", true]
            if not shutil.which("mount") or not _works(probe):
                hidden = ()
                unshare = tuple(a for a in unshare if a != "--mount-proc")
        _isolation = Isolation(unshare=unshare, drop_user=drop, prlimit=shutil.which("prlimit"), hidden=hidden)
        return _isolation


def hidden_paths() -> tuple[str, ...]:
    """The host directories each local command finds empty: homes, $LOOPLIFT_HOME, the checkout holding this
    package, the running interpreter's prefix (a venv) and the site-packages of it and of the sandbox's python3.
    A directory that holds the sandbox's python3 or its standard library, or the temp dir, is kept."""
    import site
    import sysconfig

    pkg_root = Path(__file__).resolve().parents[1]  # the checkout, or site-packages when installed
    candidates = ["/root", "/home", str(Path.home()), os.environ.get("LOOPLIFT_HOME") or "", str(pkg_root),
                  *site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if sys.prefix != sys.base_prefix:
        candidates.append(sys.prefix)
    keep = [tempfile.gettempdir()]
    python3 = shutil.which("python3", path=_defaults.PATH)
    if python3:
        keep.append(python3)
        try:
            out = subprocess.run([python3, "-I", "-c", "import site, sysconfig; print(sysconfig.get_paths()['stdlib']);"
                                  "print(*site.getsitepackages(), sep='\\n')"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.splitlines()
            keep.append(out[0])
            candidates += out[1:]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    keep_real = [os.path.realpath(k) for k in keep]
    out_paths: dict[str, None] = {}
    for c in candidates:
        real = os.path.realpath(c) if c else ""
        if not real or real == "/" or not os.path.isdir(real):
            continue
        if any(k == real or k.startswith(real.rstrip("/") + "/") for k in keep_real):
            continue  # would hide python3, its stdlib or the workdirs
        out_paths.setdefault(real, None)
    # A parent hides its children already; and mounting over a child after its parent would fail.
    ordered = sorted(out_paths)
    return tuple(p for p in ordered if not any(p.startswith(q.rstrip("/") + "/") for q in ordered if q != p))


class LocalSandbox(Sandbox):
    """A sandbox made of host subprocesses in a private temporary workdir. Read `LIMITATIONS`."""

    backend = "local"
    LIMITATIONS = LIMITATIONS

    def __init__(self, config: SandboxConfig | None = None) -> None:
        super().__init__(config or SandboxConfig())
        self.isolation = local_isolation()
        t0 = time.monotonic()
        try:
            self.workdir = Path(tempfile.mkdtemp(prefix="looplift-sbx-"))
            self._own(self.workdir)
        except OSError as e:
            raise SandboxStartError(f"could not create a workdir under {tempfile.gettempdir()}: {e}") from e
        # Removes the workdir if the sandbox is garbage-collected or the interpreter exits unclosed.
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self.start_s = time.monotonic() - t0

    @property
    def id(self) -> str:
        return self.workdir.name if hasattr(self, "workdir") else ""

    def _own(self, path: Path) -> None:
        # The command runs as 65534 when we drop root; it must own its workdir to write there.
        if self.isolation.drop_user:
            os.chown(path, _defaults.SANDBOX_UID, _defaults.SANDBOX_UID)

    def is_alive(self) -> bool:
        return not self._closed and self.workdir.is_dir()

    def _close(self) -> None:
        self._finalizer()

    # -- commands ---------------------------------------------------------------------------------

    def _argv(self, cmd: list[str], timeout: float) -> list[str]:
        iso = self.isolation
        argv = list(iso.unshare)
        if iso.mount_namespace:
            setup = _SETUP % {"scratch": " ".join(SCRATCH), "mb": self.config.workdir_mb}
            argv += ["sh", "-c", setup, "sh", str(self.workdir), *iso.hidden, "--"]
        argv += iso.drop_user
        if iso.prlimit:
            argv += [iso.prlimit, *(f"--{k}={v}" for k, v in self._limits(timeout).items()), "--"]
        return argv + list(cmd)

    def _limits(self, timeout: float) -> dict[str, int]:
        c = self.config
        return {
            "as": c.memory_mb * 1024 * 1024,
            "cpu": math.ceil(timeout) + 1,  # a backstop; the wall-clock timeout normally fires first
            "fsize": c.workdir_mb * 1024 * 1024,
            "nofile": _defaults.NOFILE,
            "core": 0,
            # Only as uid 65534: RLIMIT_NPROC counts every process of the user, so for the calling
            # user it would break unrelated work. For 65534 it is shared by all local sandboxes.
            **({"nproc": c.pids} if self.isolation.drop_user else {}),
        }

    def _preexec(self, timeout: float) -> None:
        import resource

        names = {"as": "RLIMIT_AS", "cpu": "RLIMIT_CPU", "fsize": "RLIMIT_FSIZE", "nofile": "RLIMIT_NOFILE",
                 "core": "RLIMIT_CORE", "nproc": "RLIMIT_NPROC"}
        for key, value in self._limits(timeout).items():
            resource.setrlimit(getattr(resource, names[key]), (value, value))

    def _env(self) -> dict[str, str]:
        home = str(self.workdir)
        return {"PATH": _defaults.PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1"}

    @property
    def workdir_path(self) -> str:
        return str(self.workdir)

    def _exec(
        self, cmd: list[str], timeout: float, stdin: bytes | None, limit: int, on_output: OutputCallback | None
    ) -> _Outcome:
        out, err = _CappedBuffer(limit, "stdout", on_output), _CappedBuffer(limit, "stderr", on_output)
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                self._argv(cmd, timeout),
                cwd=self.workdir,
                env=self._env(),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                # preexec_fn can deadlock in threaded programs; it is only the fallback without prlimit.
                preexec_fn=None if self.isolation.prlimit else (lambda: self._preexec(timeout)),  # noqa: PLW1509
            )
        except OSError as e:
            # The command itself not existing is reported by the shell convention (127), like Docker.
            err.write(f"{cmd[0]}: {e.strerror}\n".encode())
            return _Outcome(127, out, err, False, False, time.monotonic() - t0)
        if stdin is not None:
            threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True).start()
        timed_out = self._pump(proc, out, err, t0 + timeout)
        if timed_out:
            _kill_group(proc)
        try:
            code = proc.wait(timeout=max(0.0, t0 + timeout - time.monotonic()) if not timed_out else 5.0)
        except subprocess.TimeoutExpired:
            # It closed its output but kept running: that is a timeout too.
            timed_out = True
            _kill_group(proc)
            code = proc.wait(5.0)
        # Background children still in the command's group die with it, so nothing outlives an exec
        # even without a pid namespace (unless it left the session; see LIMITATIONS).
        _kill_group(proc)
        exit_code = 128 - code if code < 0 else code  # killed by signal N -> 128+N, as in a shell
        oom = bool(exit_code) and not timed_out and b"MemoryError" in err.getvalue()[-2000:]
        return _Outcome(exit_code, out, err, timed_out, oom, time.monotonic() - t0)

    @staticmethod
    def _pump(proc: subprocess.Popen[bytes], out: _CappedBuffer, err: _CappedBuffer, deadline: float) -> bool:
        """Drain stdout/stderr into capped buffers until both close; True when the deadline hit first."""
        sel = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        try:
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                for key, _ in sel.select(remaining):
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        key.data.write(chunk)
                    else:
                        sel.unregister(key.fileobj)
            return False
        finally:
            sel.close()
            proc.stdout.close()
            proc.stderr.close()

    def reset(self) -> None:
        with self._lock:
            self._check_open()
            # Processes do not outlive their exec here (the group kill or the pid namespace ends them),
            # so a reset only has to empty the workdir.
            for child in self.workdir.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    assert pipe is not None
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass  # the command exited without reading everything; its result says what happened


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session made pid the group id
    except ProcessLookupError:
        pass
