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
running") and the next trigger tries again. Neither lock needs a byte of free disk to be taken: on a full
disk the holder's name is left out of the lock file, and the job still runs alone.

`RunLock` is the other lock here: one job holds it on its own run directory while it runs, so that
`trainer runs` can tell a run in progress from one whose job ended without recording a result (its disk
was full) even while the job's process, a scheduler, lives on.

Deliberately not here: fairness or queueing of waiters.
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
        self._file: Optional[IO[bytes]] = None
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
        # Unbuffered: a name that a full disk refuses fails here, not again when the lock is released (at close).
        f = open(self.path, "a+b", buffering=0)  # never truncate before holding it: the holder's name is in there
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        except BaseException:
            f.close()
            raise
        f.truncate(0)
        try:
            f.write(f"{socket.gethostname()}:{os.getpid()}\n".encode())
        except OSError:  # a full disk: the flock is the lock; the name only serves messages ("another process")
            pass
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


class RunLock:
    """An exclusive `flock` on a run's directory, taken by its job when the run starts and dropped when the job
    ends, however it ends (the kernel drops it with the process). Locking a directory writes nothing, so a full
    disk cannot refuse it. `held` says whether it was taken: a file system without `flock` on directories
    (some network file systems) leaves it False, and the run's record says so (`_runs` then goes by the pid).
    Use `with RunLock(run_dir) as alive:`."""

    def __init__(self, run_dir: Path) -> None:
        self._fd: Optional[int] = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.release()

    @property
    def held(self) -> bool:
        """Whether this job holds its run's lock."""
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent): the run no longer counts as in progress."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:  # explicitly: a child forked meanwhile (a data loader's worker) shares the descriptor
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @staticmethod
    def in_progress(run_dir: Path) -> bool:
        """Whether some job (this process or another on a host sharing the file system) holds `run_dir`'s lock."""
        try:
            fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a descriptor of its own: it conflicts in-process too
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
        return False
