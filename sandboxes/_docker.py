"""`DockerSandbox`: one long-running, locked-down container per sandbox, commands run by a runner inside it.

The container's only long-lived process is the runner (`_inner.py`, under docker-init). The host keeps
its stdin/stdout attached and sends it one request per command; it forks, drops to the sandbox user
and execs. A warm `python3 -c pass` costs that fork+exec plus one round trip on an open socket,
instead of the ~50-60 ms of engine work (exec create/start/inspect, runc setns) a `docker exec` takes.

Isolation, all set at container creation:
  * no network at all (`network_mode="none"`: only `lo`);
  * read-only root filesystem; writable only the size-capped tmpfs workdir /work, a small /tmp, and
    Docker's /dev/shm and /dev/mqueue (a reset empties all four and the System V IPC objects, or the
    container is replaced: see "Reset" in `_inner.py`);
  * commands run as uid/gid 65534 ("nobody") with no capabilities (an empty bounding set too), no
    supplementary groups, no-new-privileges, a new session, and no fd but 0-2;
  * cgroup limits: memory without swap, pids, CPU quota; a capped json-file log; no Docker socket;
  * capabilities: ALL dropped, then SETUID, SETGID, SETPCAP and KILL added back for the runner alone
    (uid 0 in the container): it needs them to become the sandbox user in each child and to kill
    everything a command left behind. Children give them up before they exec (see `_inner.py`).

Deadlines are enforced twice. Inside: the runner kills every process of the command at its timeout,
and after every command ends (nothing outlives an exec). Outside: the host reads the reply with a
deadline; HARD_GRACE_S past the timeout it kills the container and starts a fresh one, so nothing the
command started can keep running even if the runner is stuck. A replaced container loses its workdir.

Leftovers: each container is removed when its sandbox closes or is collected, and, if the owning process
dies without that (SIGKILL), by the owner's reaper (`_reaper.py`, a child tied to the owner) within a second
or two; `reap_orphans` also removes containers of dead owners found at a later start.

OOM: a command killed by SIGKILL while the cgroup's `oom_kill` counter went up was killed by the
kernel's OOM killer inside this sandbox's memory cgroup; that is reported as `oom_killed`. If the OOM
killer picks the runner itself, the container stops; the host reports the command as OOM-killed
(exit 137) and starts a new container.

Not done here (a later hardening pass): a seccomp profile beyond Docker's default, user namespace
remapping, gVisor/Kata runtimes, disk quotas beyond the tmpfs sizes, per-exec cgroups (one exec's
memory use counts against the whole sandbox, which is one task's).
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import struct
import threading
import time
import uuid
import weakref
from datetime import datetime
from pathlib import Path
from typing import Any

from . import _defaults
from ._base import OutputCallback, Sandbox, _CappedBuffer, _Outcome
from ._config import SandboxConfig
from ._engine import _engine_address, _import_docker, docker_client, require_image
from .errors import SandboxBrokenError, SandboxStartError

__all__ = ["DockerSandbox"]

_ENV = {
    "PATH": _defaults.PATH,
    "HOME": _defaults.WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: The runner's source, passed as `python3 -c` (the root filesystem is read-only: nothing is copied in).
_INNER_SOURCE = (Path(__file__).resolve().parent / "_inner.py").read_text(encoding="utf-8")
#: What the runner needs and nothing more; its children drop all of them (see `_inner.py`).
_RUNNER_CAPS = ["SETUID", "SETGID", "SETPCAP", "KILL"]
_STDOUT, _STDERR = 1, 2


def _stopped_before(state: dict[str, Any] | None, t_wall: float) -> bool:
    """True when a container `State` says it stopped before wall-clock time `t_wall`."""
    if state is None or state.get("Running"):
        return False
    finished = str(state.get("FinishedAt") or "")
    try:  # RFC 3339 with nanoseconds: keep microseconds for fromisoformat
        head, _, frac = finished.rstrip("Z").partition(".")
        ts = datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()
    except ValueError:
        return False
    return ts < t_wall


def _remove_container(api: Any, holder: dict[str, str | None]) -> None:
    cid = holder.get("id")
    if cid:
        try:
            api.remove_container(cid, force=True)
        except Exception:  # noqa: BLE001, S110 - already gone, or the engine went away: nothing left to clean
            pass
        holder["id"] = None


OWNER_LABEL = "looplift.owner"
_reaped: set[str | None] = set()  # engines (None: DOCKER_HOST) reap_orphans ran on in this process
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


def _reap_once(client: Any, engine: str | None) -> None:
    with _reap_lock:
        if engine in _reaped:
            return
        _reaped.add(engine)
    reap_orphans(client)


class DockerSandbox(Sandbox):
    """A sandbox backed by one hardened Docker container (see the module docstring for the limits).

    `client` lets a pool share one docker-py client; by default the sandbox makes its own for `engine`
    (a DOCKER_HOST-style URL; default the environment's `DOCKER_HOST`). Raises `EngineUnavailableError`, `ImageNotFoundError` or
    `SandboxStartError` when it cannot start.
    """

    backend = "docker"

    def __init__(self, config: SandboxConfig | None = None, *, client: Any = None, engine: str | None = None) -> None:
        super().__init__(config or SandboxConfig())
        self._docker = _import_docker()
        self._owns_client = client is None
        self._client = client if client is not None else docker_client(url=engine)
        #: URL of the engine the container runs on (DOCKER_HOST syntax).
        self.engine: str = engine or getattr(self._client, "looplift_engine_url", None) or _engine_address()
        self._api = self._client.api
        require_image(self._client, self.config.image)
        # Once per process and engine: containers leaked there by killed processes are removed, and a reaper
        # removes ours there when this process goes, SIGKILL included. None: the DOCKER_HOST engine.
        _reap_once(self._client, engine)
        from ._reaper import tie_containers_to_this_process  # not at import: `-m sandboxes._reaper` imports us

        tie_containers_to_this_process(_owner_label(), engine)
        # The finalizer removes the container if the sandbox is garbage-collected or the interpreter
        # exits without close(); the holder lets it follow replacements.
        self._holder: dict[str, str | None] = {"id": None}
        self._finalizer = weakref.finalize(self, _remove_container, self._api, self._holder)
        self._conn: Any = None  # docker-py's socket wrapper of the attach stream
        self._sock: socket.socket | None = None  # the raw socket under it
        self._rbuf = bytearray()  # Docker-framed bytes read but not yet parsed
        self._runner_log = bytearray()  # the runner's own stderr (diagnostics), last 4 KiB
        #: Seconds the last container took from create to answering its first request.
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

    @property
    def workdir_path(self) -> str:
        return _defaults.WORKDIR

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
            cap_add=_RUNNER_CAPS,
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
                command=["python3", "-I", "-S", "-c", _INNER_SOURCE],
                user="0:0",
                # Not the workdir: Docker creates a container's working dir over the tmpfs mount with
                # mode 0755, which would make /work unwritable for the sandbox user.
                working_dir="/",
                environment={"PATH": _defaults.PATH, "LANG": "C.UTF-8"},
                labels={_defaults.LABEL: "1", OWNER_LABEL: _owner_label()},
                hostname="sandbox",
                name=f"looplift-sbx-{uuid.uuid4().hex[:12]}",
                network_disabled=True,
                stdin_open=True,
                tty=False,
                host_config=self._host_config(),
            )
            self._holder["id"] = created["Id"]
            self._conn = self._api.attach_socket(
                created["Id"], params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            self._sock = getattr(self._conn, "_sock", self._conn)
            self._rbuf.clear()
            self._api.start(created["Id"])
            self._request({"op": "ping"}, deadline=time.monotonic() + 60.0)
        except (self._docker.errors.DockerException, SandboxBrokenError, OSError) as e:
            log = self._runner_log.decode("utf-8", "replace").strip()
            self._drop_container()
            raise SandboxStartError(
                f"could not start a sandbox from {self.config.image!r}: {e}"
                + (f"; runner said: {log[-500:]}" if log else "")
                + "; check `docker info` and the dockerd log (/tmp/dockerd.log when started by scripts/setup_docker.sh)"
            ) from e
        self.start_s = time.monotonic() - t0

    def _close_stream(self) -> None:
        for closable in (self._conn, self._sock):
            try:
                if closable is not None:
                    closable.close()
            except OSError:
                pass
        self._conn = self._sock = None

    def _drop_container(self) -> None:
        self._close_stream()
        _remove_container(self._api, self._holder)

    def _replace(self) -> None:
        self._drop_container()
        self.replacements += 1
        self._start()

    def _stream_open(self) -> bool:
        """False when the attach stream has reached EOF (the container stopped); no engine round trip."""
        if self._sock is None:
            return False
        try:
            ready, _, _ = select.select([self._sock], [], [], 0)
            return not ready or self._sock.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def is_alive(self) -> bool:
        if self._closed or not self._holder.get("id") or not self._stream_open():
            return False
        state = self._state()
        return state is not None and bool(state.get("Running")) and not state.get("Paused") and not state.get("Restarting")

    def _close(self) -> None:
        self._close_stream()
        self._finalizer()  # removes the container exactly once
        if self._owns_client:
            self._client.close()

    # -- the runner protocol ----------------------------------------------------------------------

    def _request(
        self, req: dict[str, Any], *, deadline: float, out: _CappedBuffer | None = None, err: _CappedBuffer | None = None
    ) -> dict[str, Any]:
        """Send one request to the runner and read its reply frames until the result.

        Raises `SandboxBrokenError` when the stream ends first (the container stopped) and
        `TimeoutError` past `deadline`.
        """
        if self._sock is None:
            raise SandboxBrokenError("the sandbox has no container", sandbox_id=self.id)
        body = json.dumps(req).encode()
        try:
            self._sock.sendall(struct.pack(">I", len(body)) + body)
        except OSError as e:
            raise SandboxBrokenError(f"the container stopped ({e})", sandbox_id=self.id) from e
        payload = bytearray()  # runner frames (stream 1), not yet parsed
        while True:
            while len(payload) >= 5:
                size = int.from_bytes(payload[1:5], "big")
                if len(payload) < 5 + size:
                    break
                kind, data = payload[0:1], bytes(payload[5 : 5 + size])
                del payload[: 5 + size]
                if kind == b"x":
                    result: dict[str, Any] = json.loads(data)
                    if "error" in result:
                        raise SandboxBrokenError(f"the sandbox runner failed: {result['error']}", sandbox_id=self.id)
                    return result
                target = out if kind == b"o" else err
                if target is not None:
                    target.write(data)
            payload += self._read_stream(deadline)

    def _read_stream(self, deadline: float) -> bytes:
        """The next stdout bytes of the runner, demultiplexed from Docker's framing (8-byte header:
        stream id, 3 pad, big-endian size); its stderr goes to `_runner_log`."""
        assert self._sock is not None
        while True:
            got = bytearray()
            while len(self._rbuf) >= 8:
                size = int.from_bytes(self._rbuf[4:8], "big")
                if len(self._rbuf) < 8 + size:
                    break
                stream = self._rbuf[0]
                chunk = self._rbuf[8 : 8 + size]
                del self._rbuf[: 8 + size]
                if stream == _STDERR:
                    self._runner_log += chunk
                    del self._runner_log[:-4096]
                else:
                    got += chunk
            if got:
                return bytes(got)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            pending = getattr(self._sock, "pending", None)  # TLS sockets may hold decrypted bytes
            if not (pending and pending()):
                ready, _, _ = select.select([self._sock], [], [], left)
                if not ready:
                    continue
            try:
                received = self._sock.recv(1 << 16)
            except OSError:
                received = b""
            if not received:
                raise SandboxBrokenError("the container stopped", sandbox_id=self.id)
            self._rbuf += received

    def _state(self) -> dict[str, Any] | None:
        """The container's `State` as the engine reports it, or None when it cannot be inspected
        (removed, or the engine went away)."""
        cid = self._holder["id"]
        if cid is None:
            return None  # never created (docker-py would refuse the None id with a DockerException)
        try:
            state: dict[str, Any] = self._api.inspect_container(cid)["State"]
        except self._docker.errors.DockerException:
            return None
        return state

    # -- commands ---------------------------------------------------------------------------------

    def _exec(
        self, cmd: list[str], timeout: float, stdin: bytes | None, limit: int, on_output: OutputCallback | None
    ) -> _Outcome:
        req = {
            "op": "exec",
            "argv": cmd,
            "env": _ENV,
            "timeout": timeout,
            "limit": limit,
            "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
        }
        if not self._stream_open():
            self._replace()  # found dead while idle: a fresh container, then run
        for attempt in (1, 2):
            out, err = _CappedBuffer(limit, "stdout", on_output), _CappedBuffer(limit, "stderr", on_output)
            t0, sent_at = time.monotonic(), time.time()
            try:
                res = self._request(req, deadline=t0 + timeout + _defaults.HARD_GRACE_S, out=out, err=err)
            except TimeoutError:
                # The runner did not end the command in time (stuck, or starved): kill the container.
                self._replace()
                return _Outcome(None, out, err, True, False, time.monotonic() - t0)
            except SandboxBrokenError:
                state = self._state()
                if attempt == 1 and not out.getvalue() and not err.getvalue() and _stopped_before(state, sent_at):
                    self._replace()  # it was dead before the command was sent: run it in a new one
                    continue
                self._replace()
                return _Outcome(137, out, err, False, bool(state and state.get("OOMKilled")), time.monotonic() - t0)
            return _Outcome(res["exit_code"], out, err, bool(res["timed_out"]), bool(res["oom_killed"]),
                            float(res["duration_s"]))
        raise AssertionError("unreachable")

    def reset(self) -> None:
        with self._lock:
            self._check_open()
            try:
                # ok is False when something a command wrote stayed (see `_inner.reset`): then a fresh container.
                if self._stream_open() and self._request({"op": "reset"}, deadline=time.monotonic() + 10.0).get("ok"):
                    return
            except (SandboxBrokenError, TimeoutError):
                pass
            self._replace()
