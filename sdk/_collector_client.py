"""Sends finished trajectories to the collector without ever blocking or crashing the application.

`submit()` only appends to an in-memory queue. A background thread posts batches to
`POST /v1/trajectories`; when the collector is down (connection error, timeout, 5xx (507: its disk is full),
401/403) the batch is written to the spool under `$LOOPLIFT_HOME/spool` (temp file + rename, mode 0600) and replayed, oldest
first, once the collector answers again. Ingest is idempotent by trajectory id, so a batch that arrived
but whose acknowledgement was lost is not stored twice when replayed.

What it does not do: it does not anonymize (the collector does, before storing); spooled files hold raw
trajectories on the application's own disk, readable only by its user. A batch the collector rejects
as malformed (413/422) can never succeed, so it is moved to `spool/rejected/` with the reason rather
than retried forever. `close()` (also run at exit) flushes or spools what is left. When the spool's own disk is
full, a batch stays in memory and is tried again (sent or spooled) at the next retry.

Nothing submitted is lost to a SIGKILL (`durable`, the default): `submit()` appends the trajectory to this
client's journal (`spool/journal/<pid>-<id>-<n>.jsonl`, one `write()`, mode 0600) before it returns, and a
journal file is deleted once everything in it was sent, spooled or rejected. A client that starts adopts the
journals of processes that are gone (dead pid) into the spool, so they are replayed like any spooled batch; a
trajectory both delivered and replayed is stored once (ingest is idempotent by id, and of a captured session's
revisions the longest is kept). The journal survives the process, not the machine: it is not fsync'd.

A client made with `hold=True` queues (and journals) without sending until `connect()` gives it its
collector: the gateway captures from its first request although its collector starts after it.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import httpx

from . import _defaults, wire
from ._home import looplift_home, read_secret
from ._types import Trajectory
from .infra import atomic_write

log = logging.getLogger("looplift.sdk.collector")

_RETRY_LATER = {401, 403, 408, 425, 429}


@dataclass
class ClientStats:
    """Counters since the client started."""

    submitted: int = 0
    sent: int = 0
    duplicates: int = 0
    spooled: int = 0
    replayed: int = 0
    rejected: int = 0


def _reason(r: httpx.Response) -> str:
    """Why the collector refused a request: the message of its error body (`sdk.wire`), else the raw text."""
    try:
        return wire.error_message(r.json()) or r.text
    except ValueError:  # not JSON (a proxy's HTML page, say)
        return r.text


class CollectorClient:
    """Batches trajectories to the collector; spools to disk while it is unreachable."""

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        spool_dir: Optional[Path] = None,
        batch_size: int = _defaults.COLLECTOR_BATCH,
        flush_interval: float = _defaults.COLLECTOR_FLUSH_S,
        timeout: float = _defaults.COLLECTOR_TIMEOUT_S,
        retry_interval: float = 2.0,
        transport: Optional[httpx.BaseTransport] = None,
        durable: bool = True,
        hold: bool = False,
    ) -> None:
        """`url` defaults to `$LOOPLIFT_COLLECTOR_URL`, then http://127.0.0.1:8100; `api_key` to
        `$LOOPLIFT_COLLECTOR_KEY`, then `$LOOPLIFT_HOME/collector.key` (written by `looplift up`).
        `durable`: journal each trajectory before `submit()` returns (see the module docstring); `hold`: send
        nothing until `connect()`."""
        self.spool_dir = Path(spool_dir) if spool_dir is not None else looplift_home() / "spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._timeout, self._transport = timeout, transport
        self._http = self._client(url, api_key)
        self._batch_size, self._interval, self._retry_interval = batch_size, flush_interval, retry_interval
        self._queue: deque[tuple[Trajectory, Optional[_Segment]]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._flushed = threading.Event()
        self._closed = False
        self._held = hold
        self._next_replay = 0.0
        self.stats = ClientStats()
        self._journal = _Journal(self.spool_dir / "journal") if durable else None
        if self._journal is not None:
            self._journal.adopt_orphans(self._write_file, self.spool_dir)
        self._thread = threading.Thread(target=self._run, name="looplift-collector-client", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def _client(self, url: Optional[str], api_key: Optional[str]) -> httpx.Client:
        self.url = (url or os.environ.get("LOOPLIFT_COLLECTOR_URL") or _defaults.COLLECTOR_URL).rstrip("/")
        key = api_key or read_secret("LOOPLIFT_COLLECTOR_KEY", "collector.key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=self._timeout, transport=self._transport)

    # -- public -----------------------------------------------------------------------------------
    def connect(self, url: str, api_key: Optional[str] = None) -> None:
        """Send to the collector at `url` (key `api_key`, defaulting as in the constructor) from now on, and
        stop holding (`hold=True`): what was queued meanwhile goes first."""
        http = self._client(url, api_key)
        with self._lock:
            old, self._http, self._held = self._http, http, False
        old.close()
        self._next_replay = 0.0
        self._wake.set()

    def submit(self, trajectory: Trajectory) -> None:
        """Queue one trajectory (journaled first when `durable`). Never blocks on the network, never raises
        for a collector outage."""
        with self._lock:
            self.stats.submitted += 1
            if self._closed:
                self._spool([trajectory])
                return
            seg = self._journal.append(trajectory.model_dump_json()) if self._journal is not None else None
            self._queue.append((trajectory, seg))
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far was sent or spooled and the spool was retried once;
        True if that happened within `timeout` seconds (False at once while held: nothing is sent)."""
        if self._closed:
            return True
        if self._held:
            return False
        self._next_replay = 0.0
        self._flushed.clear()
        self._wake.set()
        return self._flushed.wait(timeout)

    def pending_spool(self) -> list[Path]:
        """Spooled batch files waiting to be replayed, oldest first."""
        return sorted(self.spool_dir.glob("*.jsonl"))

    def close(self, timeout: float = 10.0) -> None:
        """Flush, then stop the background thread; what could not be sent is spooled."""
        if self._closed:
            return
        self.flush(timeout)
        with self._lock:
            self._closed = True
            rest = list(self._queue)
            self._queue.clear()
        if rest and not self._spool([t for t, _ in rest]):
            log.error("%d trajectories were neither sent nor spooled (the spool's disk refused them); %s", len(rest),
                      "they stay in the journal for the next client" if self._journal is not None else
                      "they are lost with this process")
        else:
            self._settle(rest)
        self._wake.set()
        self._thread.join(timeout)
        if self._journal is not None:
            with self._lock:
                self._journal.close()
        self._http.close()
        atexit.unregister(self.close)

    def __enter__(self) -> "CollectorClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- background -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self._drain()
            except Exception:  # never let the thread die: the application must carry on
                log.exception("collector client: unexpected error; will retry")

    def _settle(self, items: list[tuple[Trajectory, Optional[_Segment]]]) -> None:
        """`items` were sent, spooled or rejected: their journal entries are no longer needed."""
        if self._journal is not None:
            with self._lock:
                self._journal.settle([seg for _, seg in items])

    def _drain(self) -> None:
        if self._held:
            return
        if self._journal is not None:
            with self._lock:  # what is submitted from now on goes to a new file; the current one empties below
                self._journal.rotate()
        while True:
            with self._lock:
                items = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            if not items:
                break
            batch = [t for t, _ in items]
            lines = [t.model_dump_json() for t in batch]
            status = self._post(lines)
            if status == "ok":
                self.stats.sent += len(batch)
            elif status == "rejected":
                self._write_file(self.spool_dir / "rejected", lines)
                self.stats.rejected += len(batch)
            elif not self._spool(batch):  # the spool's disk is full too: keep the batch queued, try again later
                with self._lock:
                    self._queue.extendleft(reversed(items))
                self._next_replay = time.monotonic() + self._retry_interval
                break
            self._settle(items)
        if time.monotonic() >= self._next_replay:
            self._replay()
        with self._lock:
            if not self._queue:
                self._flushed.set()

    def _post(self, lines: list[str]) -> str:
        body = '{"trajectories":[' + ",".join(lines) + "]}"
        try:
            r = self._http.post("/v1/trajectories", content=body, headers={"Content-Type": "application/json"})
        except httpx.HTTPError as e:
            log.warning("collector unreachable at %s (%s); spooling", self.url, type(e).__name__)
            self._next_replay = time.monotonic() + self._retry_interval
            return "retry"
        if r.status_code == 200:
            self.stats.duplicates += int(r.json().get("duplicates", 0))
            return "ok"
        if r.status_code >= 500 or r.status_code in _RETRY_LATER:
            log.warning("collector answered %s; spooling: %s", r.status_code, _reason(r)[:200])
            self._next_replay = time.monotonic() + self._retry_interval
            return "retry"
        log.error("collector rejected a batch (%s): %s", r.status_code, _reason(r)[:500])
        return "rejected"

    def _spool(self, batch: list[Trajectory]) -> bool:
        """Write `batch` to the spool; False (logged) when the spool's disk refuses it (full, read-only): the
        caller keeps it. Nothing half-written stays behind (`atomic_write`)."""
        try:
            self._write_file(self.spool_dir, [t.model_dump_json() for t in batch])
        except OSError as e:
            log.error("cannot spool %d trajectories to %s (%s); keeping them in memory", len(batch), self.spool_dir, e)
            return False
        self.stats.spooled += len(batch)
        return True

    @staticmethod
    def _write_file(folder: Path, lines: list[str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        # Sortable by time so replay goes oldest first; uuid keeps concurrent writers apart.
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.jsonl"
        atomic_write(folder / name, "\n".join(lines) + "\n", perms=0o600)

    def _replay(self) -> None:
        for path in self.pending_spool():
            lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
            if not lines:
                path.unlink(missing_ok=True)
                continue
            # Spooled lines are re-validated so a file edited by hand cannot poison a batch.
            try:
                lines = [Trajectory.model_validate(json.loads(ln)).model_dump_json() for ln in lines]
            except ValueError as e:
                log.error("spool file %s is corrupt (%s); moving it to spool/rejected/", path, e)
                self._move_aside(path)
                continue
            status = self._post(lines)
            if status == "retry":
                return
            if status == "rejected":
                self._move_aside(path)
                self.stats.rejected += len(lines)
                continue
            path.unlink(missing_ok=True)
            self.stats.replayed += len(lines)

    def _move_aside(self, path: Path) -> None:
        rejected = self.spool_dir / "rejected"
        rejected.mkdir(exist_ok=True)
        path.rename(rejected / path.name)


@dataclass
class _Segment:
    """One journal file and how many of its trajectories are not settled yet."""

    path: Path
    fd: int
    open: int = 0


class _Journal:
    """The durable client's write-ahead files (see the module docstring). Called with the client's lock held."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._n = 0
        self._current: Optional[_Segment] = None
        self._segments: list[_Segment] = []
        self._warned = False

    def adopt_orphans(self, write: Callable[[Path, list[str]], None], spool: Path) -> None:
        """Move the journals of processes that are gone into the spool (their complete lines)."""
        for path in sorted(self.folder.glob("*.jsonl")):
            pid = path.name.split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            try:
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if _complete(ln)]
                if lines:
                    write(spool, lines)
                path.unlink()
            except OSError as e:
                log.error("cannot move the journal %s into the spool (%s); will try at the next start", path, e)
                continue
            log.warning("replaying %d trajectories journaled by process %s, which ended without delivering them",
                        len(lines), pid)

    def append(self, line: str) -> Optional[_Segment]:
        """Journal one trajectory; the segment it went to, or None when the disk refused it (logged once)."""
        try:
            if self._current is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._n += 1
                path = self.folder / f"{self._prefix}-{self._n:06d}.jsonl"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._current = _Segment(path, fd)
                self._segments.append(self._current)
            data = (line + "\n").encode()
            if os.write(self._current.fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            if not self._warned:
                log.error("cannot journal trajectories under %s (%s); until it can, a SIGKILL loses what is "
                          "queued in memory", self.folder, e)
                self._warned = True
            return None
        self._warned = False
        self._current.open += 1
        return self._current

    def rotate(self) -> None:
        """New trajectories go to a new file; the current one is deleted once all of its own are settled."""
        if self._current is not None and self._current.open:
            self._current = None
        self._collect()

    def settle(self, segments: list[Optional[_Segment]]) -> None:
        for seg in segments:
            if seg is not None:
                seg.open -= 1
        self._collect()

    def _collect(self) -> None:
        for seg in [s for s in self._segments if s.open <= 0 and s is not self._current]:
            self._segments.remove(seg)
            os.close(seg.fd)
            seg.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Delete what is settled; a file with unsettled trajectories stays for the next client to adopt."""
        self._current = None
        self._collect()
        for seg in self._segments:
            os.close(seg.fd)
        self._segments.clear()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another client of this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _complete(line: str) -> bool:
    """A whole JSON object (the last line of a journal cut by a full disk may not be)."""
    if not line.strip():
        return False
    try:
        json.loads(line)
    except ValueError:
        return False
    return True
