"""Retention and per-user deletion: `Store.purge` (`collector purge`).

Deletes trajectories by ingest age and/or a metadata match, with their feedback, in short
transactions of `batch_size` trajectories so ingest never waits long for SQLite's write lock. On
SQLite `secure_delete` zeroes what is freed and the write-ahead log is truncated afterwards, so the
deleted text is gone from the database files; on Postgres the rows stay in storage until VACUUM.

A metadata match is checked first (`check_metadata_match`): stored metadata went through the
anonymizer, so a value it would replace can never select one user's rows, and is refused with
the reason. Deliberately not here: an index for metadata matches (each one scans every row's
JSON; an index needs a migration) and VACUUM (an operator's decision on Postgres).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import col

from . import _defaults
from ._anonymize import anonymize_text
from ._engine import short_error
from ._schema import FeedbackRow, ResponseIdRow, TrajectoryRow, to_naive_utc
from .errors import ConfigError, StorageError


@dataclass(frozen=True)
class PurgeResult:
    """What `Store.purge` deleted, or with `dry_run` would delete."""

    trajectories: int
    feedback: int
    dry_run: bool
    before: datetime | None
    where: dict[str, str]
    #: SQLite only: the write-ahead log was checkpointed and truncated afterwards, so no copy of a
    #: deleted page is left in the -wal file (False when a reader kept it busy; None elsewhere).
    wal_truncated: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (`collector purge --json`)."""
        return {
            "trajectories": self.trajectories,
            "feedback": self.feedback,
            "dry_run": self.dry_run,
            "before": self.before.replace(tzinfo=timezone.utc).isoformat() if self.before else None,
            "where": dict(self.where),
            "wal_truncated": self.wal_truncated,
        }


#: What the anonymizer puts in place of a value (`<EMAIL_1>`): shared by every trajectory.
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_[0-9a-f]+>")  # <EMAIL_1>, or a keyed <EMAIL_3f9a1c2b>


def check_metadata_match(key: str, value: str) -> None:
    """Refuse a `purge --where KEY=VALUE` that cannot select one user's data, saying why.

    Stored metadata went through the anonymizer, so matching is against the stored value. A value
    the anonymizer would replace (an email, a phone number ...) is stored only as a placeholder
    such as `<EMAIL_1>`, which every trajectory with an email shares: it can neither find this
    user's rows nor tell them from anyone else's. Same for a key it would rewrite.

    Raises:
        ConfigError: the key or value is empty, holds a `"`, is personal data, or is a placeholder.
    """
    if not key or not value:
        raise ConfigError(f"--where needs KEY=VALUE with both parts non-empty, got {key!r}={value!r}")
    if '"' in key or any(ord(c) < 32 for c in key):
        raise ConfigError(f"metadata key {key!r} must not contain quotes or control characters")
    for what, text in (("key", key), ("value", value)):
        if _PLACEHOLDER.search(text):
            raise ConfigError(
                f"metadata {what} {text!r} is an anonymizer placeholder: every trajectory whose {what} was "
                "personal data stores the same placeholder, so it cannot select one user's data"
            )
        anonymized, found = anonymize_text(text)
        if anonymized != text:
            kinds = ", ".join(sorted({e.kind for e in found}))
            raise ConfigError(
                f"metadata {what} {text!r} looks like personal data ({kinds}): the anonymizer replaced it by a "
                f"placeholder such as {found[0].placeholder} before storage, so no stored row holds it and it cannot "
                "select one user's data. Tag trajectories with a non-personal user key (e.g. metadata user_id=u-42, "
                "an internal id) and purge by that"
            )


def _metadata_text(dialect: str, key: str) -> sa.ColumnElement[str]:
    """SQL for `metadata[key]` of the stored JSON as text (numbers as their digits), or NULL.

    The `data` column is JSON text on both dialects, so this parses each row's JSON: a full
    scan whose cost grows with the table (measured: ~0.5-2 s per 100k rows of 4 KB on SQLite,
    ~5-7 s on Postgres, where the JSON is TOASTed). An index would need a migration: an
    expression index on one key, or a user-key column filled at ingest.
    """
    t = TrajectoryRow
    if dialect == "postgresql":
        doc = sa.cast(t.data, sa.JSON)  # json, not jsonb: measured no slower, and no binary copy built
        return doc.op("->", return_type=sa.JSON)("metadata").op("->>", return_type=sa.Text)(sa.literal(key))
    path = '$.metadata."' + key + '"'  # check_metadata_match rejected keys with quotes
    return sa.cast(sa.func.json_extract(t.data, path), sa.Text)


def _purge_condition(dialect: str, before: datetime | None, where: Mapping[str, str]) -> sa.ColumnElement[bool]:
    t = TrajectoryRow
    conds: list[sa.ColumnElement[bool]] = []
    if before is not None:
        conds.append(col(t.created_at) < to_naive_utc(before))
    for key, value in where.items():
        check_metadata_match(key, value)
        conds.append(_metadata_text(dialect, key) == value)
    if not conds:
        raise ConfigError("purge needs a cutoff (--older-than) or a metadata match (--where KEY=VALUE); "
                          "refusing to delete everything")
    return sa.and_(*conds)


def purge(
    engine: Engine,
    *,
    before: datetime | None = None,
    where: Mapping[str, str] | None = None,
    dry_run: bool = False,
    batch_size: int = _defaults.PURGE_BATCH_SIZE,
) -> PurgeResult:
    """`Store.purge` on `engine` (its docstring has the arguments and errors): check the conditions,
    then count them (`dry_run`) or delete in batches.

    Conditions combine with AND. `where` maps metadata keys to values compared with the stored
    (anonymized) metadata as text; see `check_metadata_match` for values that are refused.
    """
    where = dict(where or {})
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    cond = _purge_condition(engine.dialect.name, before, where)
    t, f = TrajectoryRow, FeedbackRow
    cutoff = to_naive_utc(before) if before is not None else None
    try:
        if dry_run:
            with engine.connect() as conn:
                n_t = conn.execute(sa.select(sa.func.count()).select_from(t).where(cond)).scalar_one()
                matching = sa.select(col(t.id)).where(cond)
                n_f = conn.execute(
                    sa.select(sa.func.count()).select_from(f).where(col(f.trajectory_id).in_(matching))
                ).scalar_one()
            return PurgeResult(int(n_t), int(n_f), True, cutoff, where)
        return _purge_batches(engine, cond, cutoff, where, batch_size)
    except sa.exc.SQLAlchemyError as e:
        raise StorageError(f"purge failed: {short_error(e)}") from e


def _matching_ids(engine: Engine, cond: sa.ColumnElement[bool], batch_size: int) -> Iterator[list[str]]:
    """The ids matching `cond`, `batch_size` at a time, in one pass over the table.

    SQLite: keyset pages in primary-key order, each its own short read, so no reader pins the
    write-ahead log while the deletes run (it would grow by every deleted page). Postgres: one
    server-side cursor over a sequential scan (an ordered scan would fetch every row through
    the index, twice as slow here on TOASTed JSON); MVCC lets it read while rows are deleted.
    Rows are never updated, so an id read once stays a valid target either way.
    """
    t = TrajectoryRow
    if engine.dialect.name == "postgresql":
        with engine.connect() as reader:
            result = reader.execution_options(stream_results=True, yield_per=batch_size).execute(sa.select(col(t.id)).where(cond))
            for part in result.partitions(batch_size):
                yield [row[0] for row in part]
        return
    last = ""
    while True:
        with engine.connect() as reader:
            ids = list(reader.execute(sa.select(col(t.id)).where(cond, col(t.id) > last).order_by(t.id).limit(batch_size)).scalars())
        if ids:
            yield ids
        if len(ids) < batch_size:
            return
        last = ids[-1]


def _purge_batches(engine: Engine, cond: sa.ColumnElement[bool], cutoff: datetime | None, where: dict[str, str],
                   batch_size: int) -> PurgeResult:
    t, f = TrajectoryRow, FeedbackRow
    sqlite = engine.dialect.name == "sqlite"
    n_t = n_f = 0
    with engine.connect() as writer:
        if sqlite:
            writer.exec_driver_sql("PRAGMA secure_delete=ON")  # this connection zeroes what it frees
            writer.commit()
        try:
            for ids in _matching_ids(engine, cond, batch_size):
                # A trajectory and its feedback go together, in one short transaction.
                with writer.begin():
                    n_f += writer.execute(sa.delete(f).where(col(f.trajectory_id).in_(ids))).rowcount
                    writer.execute(sa.delete(ResponseIdRow).where(col(ResponseIdRow.trajectory_id).in_(ids)))
                    n_t += writer.execute(sa.delete(t).where(col(t.id).in_(ids))).rowcount
        finally:
            if sqlite:
                writer.rollback()
                writer.exec_driver_sql("PRAGMA secure_delete=OFF")
                writer.commit()
    wal_truncated = _truncate_wal(engine) if sqlite and n_t else None
    return PurgeResult(n_t, n_f, False, cutoff, where, wal_truncated)


def _truncate_wal(engine: Engine) -> bool:
    """Checkpoint the WAL into the database file and truncate it (old page images of deleted
    rows would otherwise linger in the -wal file until overwritten)."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        busy, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return bool(busy == 0)
