"""Events: records other components hand the collector so that its dashboard can show them.

Two kinds so far: `retrain_run` (one per trainer run, keyed by run id: trigger, status, reason, gate
figures; written by `trainer` when it records a run) and `export` (one per `collector export`: format,
lines, matched, dropped per reason). Writing the same (kind, key) again replaces the record, so a
re-published run never shows twice.

Why a table the trainer writes through `record_event` rather than an HTTP endpoint: the trainer already
reads this database (its export, its scheduler's triggers), so its run records need no collector URL or
API key in the job's config and still land while the collector server is down; the layers stay as they
are (`trainer` imports `collector`'s public API, never the reverse). Events carry no user content (ids,
counts, version names, reasons), so they are stored as given, not anonymized.
Deliberately not here: retention (events are small and few: one per run or export).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import Field, col

from ._engine import storage_error
from ._schema import _CollectorModel, to_naive_utc, utcnow
from ._store import Store, open_store

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

    from ._export_manifest import ExportManifest

#: Event kinds the dashboard reads.
KINDS = ("retrain_run", "export")


class EventRow(_CollectorModel, table=True):
    """One event: a kind, an optional key (unique per kind), when, and its record as JSON."""

    __tablename__ = "events"
    __table_args__ = (
        sa.UniqueConstraint("kind", "key", name="uq_events_kind_key"),
        sa.Index("ix_events_kind_at", "kind", "at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(sa_type=sa.String(32))
    key: str | None = Field(default=None, sa_type=sa.String(128))
    at: datetime = Field(sa_type=sa.DateTime(), description="naive UTC")
    data: str = Field(sa_type=sa.Text)


def add_event(store: Store, kind: str, data: dict[str, Any], *, key: str | None = None,
              at: datetime | None = None) -> None:
    """Store one event; with a `key`, an existing (kind, key) event is replaced."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}: one of {', '.join(KINDS)}")
    values = {"kind": kind, "key": key, "at": to_naive_utc(at) if at else utcnow(),
              "data": json.dumps(data, default=str, separators=(",", ":"))}
    stmt: postgresql.Insert | sqlite.Insert
    if store.dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert
        stmt = postgresql_insert(EventRow).values(**values)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert
        stmt = sqlite_insert(EventRow).values(**values)
    if key is not None:
        stmt = stmt.on_conflict_do_update(index_elements=["kind", "key"], set_={"at": values["at"], "data": values["data"]})
    try:
        with store.engine.begin() as conn:
            conn.execute(stmt)
    except sa.exc.SQLAlchemyError as e:
        raise storage_error(f"could not store a {kind} event", e) from e


def list_events(store: Store, kind: str, *, since: datetime | None = None, limit: int = 200) -> list[dict[str, Any]]:
    """The newest `limit` events of `kind` (since `since`), oldest first, each its record plus `at`."""
    e = EventRow
    q = sa.select(col(e.at), col(e.data)).where(col(e.kind) == kind)
    if since is not None:
        q = q.where(col(e.at) >= to_naive_utc(since))
    with store.engine.connect() as conn:
        rows = conn.execute(q.order_by(col(e.at).desc(), col(e.id).desc()).limit(limit)).all()
    return [json.loads(r.data) | {"at": r.at.isoformat() + "Z"} for r in reversed(rows)]


def record_event(db: str | Store, kind: str, data: dict[str, Any], *, key: str | None = None) -> None:
    """`add_event` on the collector database `db` (a URL, opened and migrated, or an open `Store`).

    Raises:
        StorageError: the database could not be opened or written.
    """
    if isinstance(db, Store):
        add_event(db, kind, data, key=key)
        return
    store = open_store(db)
    try:
        add_event(store, kind, data, key=key)
    finally:
        store.close()


def record_export(db: str | Store, manifest: ExportManifest) -> None:
    """Record an export's counts (an `ExportManifest`) for the dashboard; a failure is logged, never raised
    (the export itself succeeded)."""
    m = manifest
    data = {"format": m.format, "path": m.path, "count": m.count, "matched": m.matched, "trajectories": m.trajectories,
            "tasks": m.tasks, "dropped": m.dropped, "by_app": m.by_app, "sha256": m.sha256,
            "holdout": m.holdout.count if m.holdout is not None else None}
    try:
        record_event(db, "export", data, key=f"{m.sha256[:32]}:{m.created_at.isoformat()}")
    except Exception as e:  # noqa: BLE001 - a read-only or busy database must not fail a finished export
        logging.getLogger("looplift.collector").warning("could not record the export in the collector: %s", e)
