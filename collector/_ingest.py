"""Ingest's hot path: a validated batch of trajectories becomes anonymized, scored rows, stored in one
transaction, idempotently by id.

Per batch, in this order:

1. One indexed read finds the ids already stored: a client retrying a batch costs that read, not
   the anonymizer (the most expensive step by far).
2. Per new trajectory: anonymize (`Anonymizer.trajectory`, before anything else sees the text),
   score (`_score.score_trajectory`), hash (`content_hash`) and serialize (`model_dump_json`, once).
3. One multi-row `INSERT .. ON CONFLICT DO NOTHING .. RETURNING id` (SQLAlchemy's insertmanyvalues)
   in one transaction, committed before the caller gets the result: a result (an HTTP 200) is a
   durable acknowledgement, and a crash before the commit leaves none of the batch. An id a
   concurrent request stored in between counts as a duplicate.

Where the time goes (`bench/collector.py` measures it): the anonymizer is most of it; validation,
hashing, serialization and SQLite together are the rest. The dialect-specific pieces are the
idempotent insert (`sqlalchemy.dialects.{sqlite,postgresql}.insert`) and where the ingest numbers
(`ingest_seq`, the new-data trigger's clock-free order) come from (`next_ingest_seqs`). Deliberately not
here: HTTP (`_app.py`) and dedup beyond the exact `content_hash` (export does near-dup).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pydantic_core
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import col

from sdk import IngestResult, Trajectory

from . import _capture_rows
from ._anonymize import Anonymizer
from ._engine import storage_error
from ._schema import ResponseIdRow, TrajectoryRow, to_naive_utc, utcnow
from ._score import score_trajectory
from .errors import StorageError

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.sql.dml import ReturningInsert


def content_hash(traj: Trajectory) -> str:
    """sha256 of the messages with whitespace collapsed and tool-call ids dropped.

    Tool-call ids are random per run, so two episodes that said the same things hash the same.
    The hashed text is `json.dumps(norm, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`
    of one `{"content", "name"?, "role", "tool_calls"?}` object per message: stored hashes must stay
    comparable across versions (export's exact dedup compares old rows with new ones), and a test
    pins that text. It is built by `pydantic_core.to_json` (the same bytes for these str/None/list
    values, keys inserted in sorted order), which takes 40% less time than `json.dumps`.
    """
    norm = []
    for m in traj.messages:
        # " ".join(s.split()) is exactly `\s+` -> " " then strip (both split on str.isspace), and
        # several times faster on prose than the regex.
        content = m.content
        d: dict[str, Any] = {"content": " ".join(content.split()) if content else None}
        if m.name:
            d["name"] = m.name
        d["role"] = m.role
        if m.tool_calls:
            d["tool_calls"] = [[tc.function.name, " ".join(tc.function.arguments.split())] for tc in m.tool_calls]
        norm.append(d)
    return hashlib.sha256(pydantic_core.to_json(norm)).hexdigest()


def trajectory_row(t: Trajectory, now: datetime, anonymizer: Anonymizer | None) -> dict[str, Any]:
    """The `trajectories` row of `t`: anonymized first unless `anonymizer` is None, then scored,
    hashed and serialized once. `pii` counts the values replaced per kind (the dashboard's PII panel)."""
    pii: dict[str, int] = {}
    if anonymizer is not None:
        t, found = anonymizer.trajectory_entities(t)
        for e in found:
            pii[e.kind] = pii.get(e.kind, 0) + 1
    s = score_trajectory(t)
    return {
        "id": t.id,
        "app": t.app,
        "task_id": t.task_id,
        "model": t.model,
        "served_version": t.served_version,
        "success": s.success,
        "reward": s.reward,
        "score": s.score,
        "score_source": s.source,
        "n_messages": len(t.messages),
        "content_hash": content_hash(t),
        "created_at": now,
        "started_at": to_naive_utc(t.started_at),
        "finished_at": to_naive_utc(t.finished_at),
        "data": t.model_dump_json(),
        "pii": json.dumps(pii, sort_keys=True) if pii else None,
    }


def dialect_insert(dialect: str, table: type[TrajectoryRow] | type[ResponseIdRow]) -> sqlite.Insert | postgresql.Insert:
    """`INSERT` into `table` with the dialect's `ON CONFLICT` support (SQLite or PostgreSQL)."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert
        return sqlite_insert(table)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert
        return postgresql_insert(table)
    raise StorageError(f"unsupported database dialect {dialect!r}: use SQLite or PostgreSQL")


def insert_statement(dialect: str) -> ReturningInsert[str]:
    """`INSERT .. ON CONFLICT (id) DO NOTHING RETURNING id` for `dialect` (the idempotent insert)."""
    return dialect_insert(dialect, TrajectoryRow).on_conflict_do_nothing(index_elements=["id"]).returning(col(TrajectoryRow.id))


def next_ingest_seqs(conn: sa.Connection, k: int) -> list[int]:
    """`k` ingest numbers above every one stored (migration 0006): from Postgres' sequence, or, on SQLite,
    after `max(ingest_seq)` read under the write lock the caller holds."""
    if conn.dialect.name == "postgresql":
        q = sa.text("SELECT nextval('trajectories_ingest_seq') FROM generate_series(1, :k)")
        return [int(v) for v in conn.execute(q, {"k": k}).scalars()]
    top = conn.execute(sa.select(sa.func.max(col(TrajectoryRow.ingest_seq)))).scalar()
    return list(range(int(top or 0) + 1, int(top or 0) + 1 + k))


def add_trajectories(engine: Engine, anonymizer: Anonymizer | None, trajectories: Sequence[Trajectory],
                     on_stored: Callable[[list[dict[str, Any]]], None] | None = None,
                     recompose: Callable[[sa.ColumnElement[bool]], sa.Update] | None = None) -> IngestResult:
    """Store `trajectories` in one transaction, idempotently by id (see the module docstring).

    Ids already stored (or repeated within the batch) count as duplicates and are not rewritten:
    within a batch the first occurrence wins. The one exception is a revisable trajectory (a session
    the gateway captured, which grows with every exchange and is re-sent under the same id, see
    `_capture_rows`): one with more messages than the stored row replaces it and counts as accepted, and
    so does one no longer that lists completions the stored row lacks (it is merged into the row);
    `recompose(where)`, the UPDATE that recomposes scores with the joined feedback, runs on the
    replaced rows in the same transaction. The completion ids listed in `metadata.response_ids` are
    linked to their trajectory, so feedback can name them. `anonymizer=None` stores the text as given
    (only for data that was anonymized already). `on_stored`, when given, gets the inserted (or
    replacing) rows after the commit.

    Returns:
        `IngestResult` with `ids` listing every id of the batch, in order (all are now stored).

    Raises:
        StorageError: the database failed; nothing of the batch was stored.
    """
    ids = [t.id for t in trajectories]
    if not ids:
        return IngestResult(accepted=0, duplicates=0, ids=[])
    unique: dict[str, Trajectory] = {}
    for t in trajectories:
        kept = unique.get(t.id)
        if kept is None:
            unique[t.id] = t
        elif _capture_rows.revisable(t):
            # Of a session's revisions in one batch, the longest, with what only a shorter one lists (whatever
            # their order: the spool may replay a revision from before a gateway restart after one from after it).
            longer, shorter = (t, kept) if len(t.messages) > len(kept.messages) else (kept, t)
            unique[t.id] = _capture_rows.keep_earlier(longer, shorter.model_dump(mode="json"))
    tr = TrajectoryRow
    filled: list[str] = []
    try:
        with engine.connect() as conn:
            q = sa.select(col(tr.id), col(tr.n_messages)).where(col(tr.id).in_(list(unique)))
            stored = dict(conn.execute(q).tuples().all())
            growing = [tid for tid, t in unique.items()
                       if tid in stored and _capture_rows.revisable(t) and len(t.messages) > stored[tid]]
            # A revision no longer than the stored one that lists completions the stored one lacks: from before
            # a gateway restart, arriving (journal, spool) after the restarted gateway's longer one.
            lagging = [tid for tid, t in unique.items() if tid in stored and _capture_rows.revisable(t)
                       and len(t.messages) <= stored[tid] and _capture_rows.response_ids(t)]
            if growing or lagging:
                objs = _capture_rows.stored_objects(conn, growing + lagging)
                for tid in growing:
                    unique[tid] = _capture_rows.keep_earlier(unique[tid], objs[tid])
                for tid in lagging:
                    have = Trajectory.model_validate(objs[tid])
                    merged = _capture_rows.keep_earlier(have, unique[tid].model_dump(mode="json"))
                    if merged is not have:
                        unique[tid] = merged
                        filled.append(tid)
        now = utcnow()
        rows = [trajectory_row(t, now, anonymizer) for tid, t in unique.items() if tid not in stored]
        grown = [trajectory_row(unique[tid], now, anonymizer) for tid in growing]
        refilled = [trajectory_row(unique[tid], now, anonymizer) for tid in filled]
        inserted: set[str] = set()
        replaced: list[str] = []
        if rows or grown or refilled:
            dialect = engine.dialect.name
            # The write lock first (SQLite): the ingest numbers read max(ingest_seq) under it.
            with engine.connect() as conn, conn.execution_options(sqlite_immediate=True).begin():
                changed = [*rows, *grown, *refilled]
                for row, seq in zip(changed, next_ingest_seqs(conn, len(changed))):
                    row["ingest_seq"] = seq
                if rows:
                    inserted = set(conn.execute(insert_statement(dialect), rows).scalars().all())
                if grown or refilled:
                    replaced = (_capture_rows.replace_grown(conn, grown)
                                + _capture_rows.replace_grown(conn, refilled, same_length=True))
                    if replaced and recompose is not None:
                        conn.execute(recompose(col(tr.id).in_(replaced)))
                _capture_rows.link_responses(conn, dialect_insert(dialect, ResponseIdRow),
                                             [unique[i] for i in (*inserted, *replaced)])
    except sa.exc.SQLAlchemyError as e:
        raise storage_error(f"could not store {len(ids)} trajectories", e) from e
    done = inserted | set(replaced)
    if on_stored is not None and done:
        on_stored([r for r in rows + grown + refilled if r["id"] in done])
    return IngestResult(accepted=len(done), duplicates=len(ids) - len(done), ids=ids)
