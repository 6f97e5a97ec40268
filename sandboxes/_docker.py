"""`DockerSandbox`: one long-running, locked-down container per sandbox, commands run with `docker exec`.

The container starts once (`sleep infinity` under docker-init) and every command is an exec in it,
which keeps a warm exec in the tens of milliseconds instead of the ~1 s a fresh container costs.

Isolation, all set at container creation:
  * no network at all (`network_mode="none"`: only `lo`);
  * read-only root filesystem; writable only the size-capped tmpfs workdir /work and a small /tmp;
  * commands run as uid/gid 65534 ("nobody") with every capability dropped and no-new-privileges;
  * cgroup limits: memory without swap, pids, CPU quota; a capped json-file log;
  * the idle keeper runs as a *different* unprivileged uid (65533), so cleanup can `kill -9 -1` as
    65534 and reach every process model code started, but never the keeper (see `_defaults`).

Deadlines are enforced twice. Inside: the command runs under coreutils `timeout -s KILL`, which
kills the command's whole process group. Outside: the host reads the exec stream with a deadline;
SOFT_GRACE_S past the timeout it kills every sandbox process (stragglers that left the process
group can hold the stream open), HARD_GRACE_S past it it kills the container and starts a fresh
one, so nothing the command started can keep running. A replaced container loses its workdir.

OOM: exit status 137 plus the cgroup's `oom_kill` counter going up means the kernel's OOM killer
fired inside this sandbox's memory cgroup; that is reported as `oom_killed`.

Not done here (a later hardening pass): a seccomp profile beyond Docker's default, user namespace
remapping, gVisor/Kata runtimes, disk quotas beyond the tmpfs sizes, per-exec cgroups (one exec's
memory use counts against the whole sandbox, which is one task's).
"""

from __future__ import annotations

import os
import posixpath
import select
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from . import _defaults
from ._base import ExecResult, Sandbox, _CappedBuffer
from ._config import SandboxConfig
from ._engine import _import_docker, docker_client, require_image
from .errors import SandboxBrokenError, SandboxFileError, SandboxStartError

__all__ = ["DockerSandbox"]

_ENV = {
    "PATH": _defaults.PATH,
    "HOME": _defaults.WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Kill every process of the exec user except this shell (kill(-1) skips the caller), then empty the
# writable mounts. Globs cover dotfiles; `|| true` because an empty dir leaves the globs unmatched.
_KILL_ALL = "kill -9 -1 2>/dev/null; true"
_RESET = (
    "kill -9 -1 2>/dev/null; "
    f"rm -rf {_defaults.WORKDIR}/* {_defaults.WORKDIR}/.[!.]* {_defaults.WORKDIR}/..?* "
    "/tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null; true"
)
# cgroup v1 keeps `oom_kill N` in memory.oom_control, v2 in memory.events.
_OOM_COUNTER = "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events"
_STDOUT, _STDERR = 1, 2


@dataclass
class _Raw:
    """One exec's outcome before interpretation (bytes, no timeout/OOM classification yet)."""

    exit_code: int | None
    stdout: _CappedBuffer
    stderr: _CappedBuffer
    duration_s: float
    soft_killed: bool = False  # the host killed stragglers past the deadline
    hard_killed: bool = False  # the host killed the container past the deadline


def _remove_container(api: Any, holder: dict[str, str | None]) -> None:
    cid = holder.get("id")
    if cid:
        try:
            api.remove_container(cid, force=True)
        except Exception:  # noqa: BLE001, S110 - already gone, or the engine went away: nothing left to clean
            pass
        holder["id"] = None


OWNER_LABEL = "looplift.owner"
_reaped_once = False
_reap_lock = threading.Lock()


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/PID/stat), or None if there is no such process.
    With the pid it names one process instance: a recycled pid has a different start time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start(os.getpid()) or '?'}"


def reap_orphans(client: Any = None) -> list[str]:
    """Remove sandbox containers whose owning process on this host is gone (killed with SIGKILL or SIGTERM,
    which skip the normal cleanup). Containers of live processes, of other hosts, and containers without
    an owner label are left alone. Returns the removed container names."""
    client = client if client is not None else docker_client()
    host = socket.gethostname()
    removed = []
    for c in client.api.containers(all=True, filters={"label": _defaults.LABEL}):
        owner = (c.get("Labels") or {}).get(OWNER_LABEL, "")
        parts = owner.rsplit(":", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue
        if _proc_start(int(parts[1])) == parts[2]:
            continue  # its owner is alive
        try:
            client.api.remove_container(c["Id"], force=True)
            removed.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
        except Exception:  # noqa: BLE001 - raced with another reaper or the engine: nothing to do
            pass
    return removed


def _reap_once(client: Any) -> None:
    global _reaped_once
    with _reap_lock:
        if _reaped_once:
            return
        _reaped_once = True
    reap_orphans(client)


class DockerSandbox(Sandbox):
    """A sandbox backed by one hardened Docker container (see the module docstring for the limits).

    `client` lets a pool share one docker-py client; by default the sandbox makes its own from the
    environment (`DOCKER_HOST`). Raises `EngineUnavailableError`, `ImageNotFoundError` or
    `SandboxStartError` when it cannot start.
    """

    backend = "docker"

    def __init__(self, config: SandboxConfig | None = None, *, client: Any = None) -> None:
        super().__init__(config or SandboxConfig())
        self._docker = _import_docker()
        self._owns_client = client is None
        self._client = client if client is not None else docker_client()
        self._api = self._client.api
        require_image(self._client, self.config.image)
        _reap_once(self._client)  # containers leaked by killed processes are removed once per process
        # The finalizer removes the container if the sandbox is garbage-collected or the interpreter
        # exits without close(); the holder lets it follow replacements.
        self._holder: dict[str, str | None] = {"id": None}
        self._finalizer = weakref.finalize(self, _remove_container, self._api, self._holder)
        self._oom_kills = 0
        #: Seconds the last container took from create to running (measured for the docs/bench).
        self.start_s = 0.0
        #: How many times this sandbox replaced its container (after a hard kill or a death).
        self.replacements = 0
        self._start()

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        cid = self._holder.get("id")
        return cid[:12] if cid else ""

    @property
    def container_id(self) -> str | None:
        """Full id of the current container (changes when the container is replaced)."""
        return self._holder.get("id")

    def _host_config(self) -> Any:
        c = self.config
        return self._api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={
                _defaults.WORKDIR: f"rw,exec,nosuid,nodev,size={c.workdir_mb}m,mode=1777",
                "/tmp": f"rw,noexec,nosuid,nodev,size={_defaults.TMP_MB}m,mode=1777",
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=c.pids,
            mem_limit=f"{c.memory_mb}m",
            memswap_limit=f"{c.memory_mb}m",  # equal to mem_limit: no swap to hide an OOM behind
            nano_cpus=int(c.cpus * 1e9),
            init=True,
            ipc_mode="private",
            ulimits=[
                self._docker.types.Ulimit(name="core", soft=0, hard=0),
                self._docker.types.Ulimit(name="nofile", soft=1024, hard=1024),
            ],
            log_config=self._docker.types.LogConfig(
                type="json-file", config={"max-size": "1m", "max-file": "1"}
            ),
        )

    def _start(self) -> None:
        t0 = time.monotonic()
        try:
            created = self._api.create_container(
                self.config.image,
                command=["sleep", "infinity"],
                user=_defaults.KEEPER_USER,
                # Not the workdir: Docker creates a container's working dir over the tmpfs mount with
                # mode 0755, which would make /work unwritable for the exec user. Execs set it instead.
                working_dir="/",
                environment=_ENV,
                labels={_defaults.LABEL: "1", OWNER_LABEL: _owner_label()},
                hostname="sandbox",
                name=f"looplift-sbx-{uuid.uuid4().hex[:12]}",
                network_disabled=True,
                host_config=self._host_config(),
            )
            self._holder["id"] = created["Id"]
            self._api.start(created["Id"])
        except self._docker.errors.DockerException as e:
            _remove_container(self._api, self._holder)
            raise SandboxStartError(
                f"could not start a container from {self.config.image!r}: {e}; check `docker info` and the "
                "dockerd log (/tmp/dockerd.log when started by scripts/setup_docker.sh)"
            ) from e
        self._oom_kills = 0  # a fresh cgroup
        self.start_s = time.monotonic() - t0

    def _replace(self) -> None:
        _remove_container(self._api, self._holder)
        self.replacements += 1
        self._start()

    def is_alive(self) -> bool:
        if self._closed or not self._holder.get("id"):
            return False
        try:
            state = self._api.inspect_container(self._holder["id"])["State"]
        except self._docker.errors.DockerException:
            return False
        return bool(state.get("Running")) and not state.get("Paused") and not state.get("Restarting")

    def _close(self) -> None:
        self._finalizer()  # removes the container exactly once
        if self._owns_client:
            self._client.close()

    # -- commands ---------------------------------------------------------------------------------

    def exec(self, cmd: list[str], *, timeout: float | None = None, stdin: str | None = None) -> ExecResult:
        _check_cmd(cmd)
        t = self._timeout(timeout)
        data = stdin.encode("utf-8") if stdin is not None else None
        wrapped = ["timeout", "-s", "KILL", f"{t:g}", *cmd]
        with self._lock:
            self._check_open()
            raw = self._run_healing(wrapped, deadline_s=t, stdin=data, limit=self.config.output_limit_bytes)
            return self._classify(raw, t)

    def _run_healing(self, argv: list[str], **kw: Any) -> _Raw:
        # Asking the engine whether the container runs before every exec would cost a round trip on
        # the hot path; instead a container found dead is replaced and the command tried once more.
        try:
            return self._run(argv, **kw)
        except SandboxBrokenError:
            self._replace()
            return self._run(argv, **kw)

    def _classify(self, raw: _Raw, timeout: float) -> ExecResult:
        timed_out = raw.hard_killed or raw.soft_killed
        oom = False
        code = raw.exit_code
        if raw.hard_killed:
            self._replace()
        elif code == 137:
            # 137 is SIGKILL: from the OOM killer, or from `timeout` killing its process group.
            oom = self._oom_counter_rose()
            if not oom and raw.duration_s >= timeout * 0.98:
                timed_out = True
        elif code == 124:
            timed_out = True
        if timed_out:
            code = None
            if not raw.hard_killed:
                self._kill_stragglers()
        if code is not None and code >= 128 and not self.is_alive():
            # The kill took the keeper with it (e.g. the OOM killer chose it): start over.
            self._replace()
        return ExecResult(
            exit_code=code,
            stdout=raw.stdout.text(),
            stderr=raw.stderr.text(),
            stdout_truncated=raw.stdout.truncated,
            stderr_truncated=raw.stderr.truncated,
            timed_out=timed_out,
            oom_killed=oom,
            duration_s=raw.duration_s,
        )

    def _oom_counter_rose(self) -> bool:
        try:
            raw = self._run(["sh", "-c", _OOM_COUNTER], deadline_s=5.0, limit=4096, escalate=False)
        except SandboxBrokenError:
            return False
        for line in raw.stdout.text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                count = int(value)
                rose = count > self._oom_kills
                self._oom_kills = count
                return rose
        # No counter (old kernel): fall back to what the engine recorded for the container.
        try:
            return bool(self._api.inspect_container(self._holder["id"])["State"].get("OOMKilled"))
        except self._docker.errors.DockerException:
            return False

    def _kill_stragglers(self) -> None:
        try:
            self._run(["sh", "-c", _KILL_ALL], deadline_s=5.0, limit=4096, escalate=False)
        except SandboxBrokenError:
            self._replace()

    def _run(
        self,
        argv: list[str],
        *,
        deadline_s: float,
        limit: int,
        stdin: bytes | None = None,
        escalate: bool = True,
    ) -> _Raw:
        """Exec `argv` as the sandbox user and collect its output under a host-side deadline.

        With `escalate`, SOFT_GRACE_S past `deadline_s` every sandbox process is killed and
        HARD_GRACE_S past it the container is; without it (internal housekeeping), the deadline
        raises `SandboxBrokenError`.
        """
        cid = self._holder["id"]
        out, err = _CappedBuffer(limit), _CappedBuffer(limit)
        t0 = time.monotonic()
        try:
            exec_id = self._api.exec_create(
                cid,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin is not None,
                user=_defaults.EXEC_USER,
                workdir=_defaults.WORKDIR,
                environment=_ENV,
            )["Id"]
            sock = self._api.exec_start(exec_id, socket=True)
        except self._docker.errors.NotFound as e:
            raise SandboxBrokenError(f"the container is gone ({e})", sandbox_id=self.id) from e
        except self._docker.errors.APIError as e:
            if "is not running" in str(e) or "No such container" in str(e):
                raise SandboxBrokenError(f"the container stopped ({e})", sandbox_id=self.id) from e
            raise
        raw_sock: socket.socket = getattr(sock, "_sock", sock)
        raw = _Raw(None, out, err, 0.0)
        writer = None
        try:
            if stdin is not None:
                writer = threading.Thread(target=_send_stdin, args=(raw_sock, stdin), daemon=True)
                writer.start()
            self._pump(raw_sock, out, err, raw, t0, deadline_s, escalate)
        finally:
            try:
                sock.close()
                raw_sock.close()
            except OSError:
                pass
        if writer is not None:
            writer.join(1.0)
        raw.duration_s = time.monotonic() - t0
        if not raw.hard_killed:
            raw.exit_code = self._exit_code(exec_id)
        return raw

    def _pump(
        self,
        sock: socket.socket,
        out: _CappedBuffer,
        err: _CappedBuffer,
        raw: _Raw,
        t0: float,
        deadline_s: float,
        escalate: bool,
    ) -> None:
        """Demultiplex Docker's framed stream (8-byte header: stream id, 3 pad, big-endian size)."""
        soft_at = t0 + deadline_s + _defaults.SOFT_GRACE_S
        hard_at = t0 + deadline_s + _defaults.HARD_GRACE_S
        buf = bytearray()
        while True:
            now = time.monotonic()
            if now >= soft_at and escalate and not raw.soft_killed:
                raw.soft_killed = True
                self._kill_stragglers()
                continue
            if now >= hard_at:
                if not escalate:
                    raise SandboxBrokenError(
                        "a housekeeping command did not finish in time; the container is replaced on next use",
                        sandbox_id=self.id,
                    )
                # Killing the container closes the stream and ends every process in it.
                raw.hard_killed = True
                try:
                    self._api.kill(self._holder["id"])
                except self._docker.errors.DockerException:
                    pass
                return
            wait = (soft_at if escalate and not raw.soft_killed else hard_at) - now
            pending = getattr(sock, "pending", None)  # TLS sockets may hold decrypted bytes
            if not (pending and pending()):
                ready, _, _ = select.select([sock], [], [], max(wait, 0.0))
                if not ready:
                    continue
            try:
                chunk = sock.recv(1 << 16)
            except (ConnectionError, OSError):
                chunk = b""
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 8:
                size = int.from_bytes(buf[4:8], "big")
                if len(buf) < 8 + size:
                    break
                (err if buf[0] == _STDERR else out).write(bytes(buf[8 : 8 + size]))
                del buf[: 8 + size]

    def _exit_code(self, exec_id: str) -> int | None:
        # The stream can close a moment before the engine records the exit code.
        for _ in range(100):
            try:
                info = self._api.exec_inspect(exec_id)
            except self._docker.errors.NotFound:
                # The container was removed under the running command: it was killed with it.
                return 137
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            time.sleep(0.01)
        return None

    # -- files ------------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        if not path or "\x00" in path:
            raise SandboxFileError(f"invalid path {path!r}", sandbox_id=self.id)
        return posixpath.normpath(posixpath.join(_defaults.WORKDIR, path))

    def write_file(self, path: str, content: str | bytes) -> None:
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        target = self._path(path)
        with self._lock:
            self._check_open()
            raw = self._run_healing(
                ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh", target],
                deadline_s=max(self.config.timeout_s, 10.0),
                stdin=data,
                limit=4096,
                escalate=False,
            )
        if raw.exit_code != 0:
            raise SandboxFileError(
                f"could not write {target} ({len(data)} bytes): {raw.stderr.text().strip() or raw.exit_code}; "
                f"only {_defaults.WORKDIR} and /tmp are writable, the workdir holds {self.config.workdir_mb} MiB",
                sandbox_id=self.id,
            )

    def read_file(self, path: str) -> bytes:
        target = self._path(path)
        limit = self.config.workdir_mb * 1024 * 1024
        with self._lock:
            self._check_open()
            raw = self._run_healing(
                ["cat", "--", target], deadline_s=max(self.config.timeout_s, 10.0), limit=limit, escalate=False
            )
        if raw.exit_code != 0:
            raise SandboxFileError(
                f"could not read {target}: {raw.stderr.text().strip() or raw.exit_code}", sandbox_id=self.id
            )
        return raw.stdout.getvalue()

    def reset(self) -> None:
        with self._lock:
            self._check_open()
            if not self.is_alive():
                self._replace()
                return
            try:
                raw = self._run(["sh", "-c", _RESET], deadline_s=10.0, limit=4096, escalate=False)
            except SandboxBrokenError:
                self._replace()
                return
            if raw.exit_code != 0:
                self._replace()


def _send_stdin(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        # Half-close: the engine then closes the command's stdin, so `cat`-like readers finish.
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the command exited without reading all of it; its result says what happened


def _check_cmd(cmd: list[str]) -> None:
    if not isinstance(cmd, (list, tuple)) or not cmd or not all(isinstance(a, str) for a in cmd):
        raise ValueError(f"cmd must be a non-empty list of strings (argv, no shell), got {cmd!r}")
