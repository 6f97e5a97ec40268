"""Sends finished trajectories to the collector without ever blocking or crashing the application.

`submit()` only appends to an in-memory queue. A background thread posts batches to
`POST /v1/trajectories`; when the collector is down (connection error, timeout, 5xx, 401/403) the batch
is written to the spool under `$LOOPLIFT_HOME/spool` (temp file + rename, mode 0600) and replayed, oldest
first, once the collector answers again. Ingest is idempotent by trajectory id, so a batch that arrived
but whose acknowledgement was lost is not stored twice when replayed.

What it does not do: it does not anonymize (the collector does, before storing); spooled files hold raw
trajectories on the application's own disk, readable only by its user. A batch the collector rejects
as malformed (413/422) can never succeed, so it is moved to `spool/rejected/` with the reason rather
than retried forever. Trajectories still in memory when the process is killed with SIGKILL are lost
(at most one flush interval's worth); `close()` (also run at exit) flushes or spools them.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

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
    ) -> None:
        """`url` defaults to `$LOOPLIFT_COLLECTOR_URL`, then http://127.0.0.1:8100; `api_key` to
        `$LOOPLIFT_COLLECTOR_KEY`, then `$LOOPLIFT_HOME/collector.key` (written by `looplift up`)."""
        self.url = (url or os.environ.get("LOOPLIFT_COLLECTOR_URL") or _defaults.COLLECTOR_URL).rstrip("/")
        key = api_key or read_secret("LOOPLIFT_COLLECTOR_KEY", "collector.key")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.spool_dir = Path(spool_dir) if spool_dir is not None else looplift_home() / "spool"
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)
        self._batch_size, self._interval, self._retry_interval = batch_size, flush_interval, retry_interval
        self._queue: deque[Trajectory] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._flushed = threading.Event()
        self._closed = False
        self._next_replay = 0.0
        self.stats = ClientStats()
        self._thread = threading.Thread(target=self._run, name="looplift-collector-client", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # -- public -----------------------------------------------------------------------------------
    def submit(self, trajectory: Trajectory) -> None:
        """Queue one trajectory. Never blocks on the network, never raises for a collector outage."""
        with self._lock:
            self.stats.submitted += 1
            if self._closed:
                self._spool([trajectory])
                return
            self._queue.append(trajectory)
        if len(self._queue) >= self._batch_size:
            self._wake.set()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far was sent or spooled and the spool was retried once;
        True if that happened within `timeout` seconds."""
        if self._closed:
            return True
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
        if rest:
            self._spool(rest)
        self._wake.set()
        self._thread.join(timeout)
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

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch = [self._queue.popleft() for _ in range(min(self._batch_size, len(self._queue)))]
            if not batch:
                break
            lines = [t.model_dump_json() for t in batch]
            status = self._post(lines)
            if status == "ok":
                self.stats.sent += len(batch)
            elif status == "rejected":
                self._write_file(self.spool_dir / "rejected", lines)
                self.stats.rejected += len(batch)
            else:
                self._spool(batch)
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

    def _spool(self, batch: list[Trajectory]) -> None:
        self._write_file(self.spool_dir, [t.model_dump_json() for t in batch])
        self.stats.spooled += len(batch)

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
