"""One retrain job at a time per collector database, across processes and hosts.

Two jobs must never overlap: both would train on the same data, load two candidates and race to flip
the alias. The lock is keyed by the collector database, because that is what every job reading the
same data (and publishing for it) shares:

- SQLite (and anything that is not Postgres): an exclusive `fcntl.flock` on `<db file>.trainer.lock`
  beside the database file (else `<runs dir>/job.lock`). The kernel drops it when the holder dies,
  however it dies; the file holds the holder's host and pid for messages.
- Postgres: a session-level `pg_try_advisory_lock` (keyed by the collector's schema) on a dedicated
  connection, held for the job; the
  server drops it when that connection ends (process killed, host gone), so every host that reaches
  the database shares it.

Acquisition never waits: a trigger that finds the lock held is recorded as skipped ("another job is
running") and the next trigger tries again. Deliberately not here: fairness or queueing of waiters.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from pathlib import Path
from typing import IO, Any, Optional



def pg_lock_key(schema: str) -> int:
    """The advisory-lock key for the collector tables in `schema`: a signed 64-bit number derived from a
    fixed name and the schema, the same on every host (two collectors in one database do not share it)."""
    return int.from_bytes(hashlib.sha256(f"looplift.trainer.job:{schema}".encode()).digest()[:8], "big", signed=True)


def _sqlite_path(db_url: str) -> Optional[Path]:
    prefix = "sqlite:///"
    if not db_url.startswith(prefix):
        return None
    path = db_url[len(prefix):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


class JobLock:
    """The retrain-job lock for `collector_db`; `fallback_dir` holds the lock file when the database
    is not a file (e.g. an in-memory SQLite). Use `try_acquire()` / `release()`, or `with lock:` after
    a successful `try_acquire()`."""

    def __init__(self, collector_db: str, fallback_dir: Path) -> None:
        self.collector_db = collector_db
        self._pg = collector_db.startswith(("postgresql", "postgres"))
        db_file = _sqlite_path(collector_db)
        self.path = (db_file.with_name(db_file.name + ".trainer.lock") if db_file is not None
                     else Path(fallback_dir) / "job.lock")
        self._file: Optional[IO[str]] = None
        self._engine: Any = None
        self._conn: Any = None
        self._key: Optional[int] = None

    @property
    def description(self) -> str:
        """Which lock this is, for messages."""
        if self._pg:
            return "Postgres advisory lock" + (f" {self._key}" if self._key is not None else "")
        return f"file lock {self.path}"

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._file is not None or self._conn is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; False (at once) when another job holds it."""
        if self.held:
            raise RuntimeError("JobLock is not reentrant: this object already holds it")
        return self._acquire_pg() if self._pg else self._acquire_file()

    def holder(self) -> str:
        """Who holds the lock, as far as can be told ("host:pid" for the file lock)."""
        if self._pg:
            return "another session of the collector database"
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "another process"

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._file is not None:
            f, self._file = self._file, None
            try:
                fcntl.flock(f, fcntl.LOCK_UN)
            finally:
                f.close()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({self._key})")
            finally:
                conn.close()
                self._engine.dispose()

    def __enter__(self) -> "JobLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _acquire_file(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")  # never truncate before holding it: the holder's name is in there
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        except BaseException:
            f.close()
            raise
        f.seek(0)
        f.truncate()
        f.write(f"{socket.gethostname()}:{os.getpid()}\n")
        f.flush()
        self._file = f
        return True

    def _acquire_pg(self) -> bool:
        import sqlalchemy as sa

        # A dedicated connection outside any pool: the lock lives exactly as long as it does.
        engine = sa.create_engine(self.collector_db, poolclass=sa.pool.NullPool,
                                  isolation_level="AUTOCOMMIT")
        conn = engine.connect()
        try:
            self._key = pg_lock_key(str(conn.exec_driver_sql("SELECT current_schema()").scalar()))
            got = bool(conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({self._key})").scalar())
        except BaseException:
            conn.close()
            engine.dispose()
            raise
        if not got:
            conn.close()
            engine.dispose()
            return False
        self._engine, self._conn = engine, conn
        return True
