"""Database URLs and engines: one SQLAlchemy engine per store, SQLite or Postgres.

`make_engine` validates the URL (a one-line fix in the error), creates SQLite's directory, and sets
SQLite up for a server: WAL (readers never block ingest), a busy timeout, `synchronous=NORMAL`
(durable across application crashes in WAL mode), and transactions that really begin at BEGIN
(pysqlite's own handling defers it and breaks transactional DDL), IMMEDIATE where asked.

Deliberately not here: the schema (`_schema.py`), migrations (`_migrate.py`), and any pooling or
driver tuning beyond `pool_pre_ping` on Postgres.
"""

from __future__ import annotations

import errno
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from . import _defaults
from .errors import ConfigError, StorageError, StorageFullError

#: SQLite's SQLITE_FULL (`sqlite3.Error.sqlite_errorcode`, primary code in the low byte); PostgreSQL's SQLSTATE
#: disk_full; the errnos of a full disk and of a full quota.
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


def short_error(e: BaseException) -> str:
    """The driver's message without SQLAlchemy's echo of the statement and its parameters
    (which would put trajectory text into logs and HTTP responses)."""
    orig = getattr(e, "orig", None)
    return f"{type(orig or e).__name__}: {orig or e}".splitlines()[0]


def disk_full(e: BaseException) -> bool:
    """Whether a database call failed because the disk (or a quota) is full: SQLite's SQLITE_FULL, PostgreSQL's
    disk_full, or ENOSPC/EDQUOT from the file system."""
    orig = getattr(e, "orig", None) or e
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:
        return True
    if getattr(orig, "sqlstate", None) == _PG_DISK_FULL:
        return True
    return isinstance(orig, OSError) and orig.errno in _FULL_ERRNOS


def storage_error(what: str, e: BaseException) -> StorageError:
    """The error for a failed write: `what` failed, and why; a `StorageFullError` when the disk is full."""
    if disk_full(e):
        return StorageFullError(f"{what}: the database's disk is full ({short_error(e)}); nothing was stored. "
                                "Free space where the database lives (or lower the retention), then send again")
    return StorageError(f"{what}: {short_error(e)}")


def default_db_url(home: str | None = None) -> str:
    """`sqlite:///$LOOPLIFT_HOME/collector.db`, with `home` defaulting to `~/.looplift`."""
    base = Path(home or _defaults.DEFAULT_HOME).expanduser()
    return f"sqlite:///{base / _defaults.DB_FILENAME}"


def make_engine(db_url: str) -> Engine:
    """An engine for `db_url`; for SQLite, WAL mode, a busy timeout and real transactions."""
    try:
        url = sa.make_url(db_url)
    except sa.exc.ArgumentError as e:
        raise ConfigError(
            f"invalid database URL {db_url!r}: use sqlite:///PATH or postgresql+psycopg://USER:PASS@HOST/DB ({e})"
        ) from e
    backend = url.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ConfigError(
            f"unsupported database {backend!r} in {url.render_as_string(hide_password=True)}: "
            "use sqlite:///PATH or postgresql+psycopg://USER:PASS@HOST/DB"
        )
    if backend == "postgresql":
        try:
            return sa.create_engine(url, pool_pre_ping=True)
        except ImportError as e:
            raise ConfigError(f"no Postgres driver for {url.drivername}: pip install 'psycopg[binary]' ({e})") from e

    if url.database and url.database != ":memory:":
        parent = Path(url.database).expanduser().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create the database directory {parent}: {e}; pass a writable --db path") from e
    engine = sa.create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling defers BEGIN and breaks transactional DDL; take it
        # over (the SQLAlchemy-documented recipe) so migrations and batches are atomic.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={_defaults.SQLITE_BUSY_TIMEOUT_MS}")
        _wal(cur)  # readers (export, stats) never block ingest
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across app crashes in WAL mode
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # IMMEDIATE (asked for with the `sqlite_immediate` execution option) takes the write lock
        # up front, waiting up to the busy timeout: a deferred transaction that reads first (the
        # migration reads the version table) would fail with "database is locked" at its first
        # write when another process got there between, instead of waiting.
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _wal(cur: Any) -> None:
    """Switch the database to WAL, retrying while another process holds the lock, up to the busy timeout.

    The switch needs an exclusive lock, and SQLite answers "database is locked" at once, without calling the busy
    handler, when waiting could deadlock (several processes switching a fresh database together: `collector serve
    --workers N` starting up; seen once in 12 starts of 4 workers on a loaded machine). Once the file is in WAL mode
    the pragma takes no lock, so only the first connections ever wait here."""
    deadline = time.monotonic() + _defaults.SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
