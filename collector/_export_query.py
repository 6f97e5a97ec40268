"""What an export reads, in SQL: its filters, exact dedup, balance rates and keyset pages.

Filters and exact dedup are one WHERE clause (`where`); rows come in keyset pages (`pages`) over
the composite indexes of `_schema.TrajectoryRow`, each page its own short read, so no long
transaction pins SQLite's write-ahead log while ingest goes on. Deliberately not here: anything
that needs a row's text (near-dup, decontamination, formats: `_export.py`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import aliased
from sqlmodel import col

from ._export_correction import Correction
from ._export_manifest import ExportFilters
from ._schema import FeedbackRow, TrajectoryRow
from ._store import Store

#: What `balance` can equalize.
BALANCE_BY = ("task", "cluster")


def conditions(t: type[TrajectoryRow], f: ExportFilters) -> list[sa.ColumnElement[bool]]:
    """The filters of `f` as SQL conditions on the table (or alias) `t`."""
    conds = [col(t.created_at) < f.until]
    if f.since is not None:
        conds.append(col(t.created_at) >= f.since)
    if f.app is not None:
        conds.append(col(t.app) == f.app)
    if f.task is not None:
        conds.append(col(t.task_id) == f.task)
    if f.model_version is not None:
        conds.append(col(t.served_version) == f.model_version)
    if f.min_reward is not None:
        conds.append(col(t.reward) >= f.min_reward)
    if f.min_score is not None:
        score_ok = col(t.score) >= f.min_score
        if f.corrections:
            fb = FeedbackRow
            score_ok = sa.or_(score_ok, col(t.id).in_(sa.select(col(fb.trajectory_id)).where(col(fb.correction).is_not(None))))
        conds.append(score_ok)
    return conds


def where_clause(f: ExportFilters, *, exact_dedup: bool) -> sa.ColumnElement[bool]:
    """The rows an export reads: the filters, and with `exact_dedup` only the first of each content hash."""
    t = TrajectoryRow
    conds = conditions(t, f)
    if exact_dedup:
        # Keep the earliest (created_at, id) of each content hash among the rows the filters keep.
        t2 = aliased(TrajectoryRow)
        earlier = sa.or_(col(t2.created_at) < t.created_at, sa.and_(col(t2.created_at) == t.created_at, col(t2.id) < t.id))
        conds.append(~sa.exists().where(col(t2.content_hash) == t.content_hash, earlier, *conditions(t2, f)))
    return sa.and_(*conds)


def count_rows(store: Store, where: sa.ColumnElement[bool]) -> int:
    """How many trajectories match `where`."""
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(TrajectoryRow).where(where)).scalar_one())


def pages(store: Store, where: sa.ColumnElement[bool], keys: list[Any], batch: int) -> Iterator[Sequence[sa.Row[*tuple[Any, ...]]]]:
    """Keyset pagination over `keys` (the last is the unique id): short reads, no long transaction."""
    t = TrajectoryRow
    cols = [t.id, t.task_id, t.app, t.served_version, t.reward, t.score, t.success, t.cluster, t.created_at, t.data]
    base = sa.select(*map(col, cols)).where(where).order_by(*keys)
    last: tuple[Any, ...] | None = None
    while True:
        q = base
        if last is not None:
            q = q.where(sa.tuple_(*keys) > sa.tuple_(*last))  # a range scan on the matching composite index
        with store.engine.connect() as conn:
            page = conn.execute(q.limit(batch)).all()
        if page:
            yield page
        if len(page) < batch:
            return
        last = tuple(getattr(page[-1], k.key) for k in keys)


def latest_corrections(store: Store, ids: list[str]) -> dict[str, Correction]:
    """The latest user correction of each of `ids` that has one, with the response id it named."""
    fb = FeedbackRow
    q = (sa.select(col(fb.trajectory_id), col(fb.correction), col(fb.response_id))
         .where(col(fb.trajectory_id).in_(ids), col(fb.correction).is_not(None)))
    with store.engine.connect() as conn:
        rows = conn.execute(q.order_by(col(fb.id))).all()
    return {tid: Correction(c, rid) for tid, c, rid in rows if c is not None}  # latest correction wins


def balance_rates(store: Store, where: sa.ColumnElement[bool], by: str, per_group: int | None,
                  limit: int | None) -> tuple[dict[Any, float], int]:
    """Per group (task or cluster), the probability of keeping a row, and the resolved `per_group`:
    given, else the largest cap that fits `limit`, else the median group size."""
    group_col = col(TrajectoryRow.task_id) if by == "task" else col(TrajectoryRow.cluster)
    with store.engine.connect() as conn:
        sizes: dict[str | int | None, int] = dict(
            conn.execute(sa.select(group_col, sa.func.count()).where(where).group_by(group_col)).tuples().all())
    if not sizes:
        return {}, per_group or 0
    if per_group is None:
        if limit is not None:  # the largest cap K with sum(min(n, K)) <= limit
            lo, hi = 0, max(sizes.values())
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if sum(min(n, mid) for n in sizes.values()) <= limit else (lo, mid - 1)
            per_group = max(1, lo)
        else:
            per_group = max(1, int(statistics.median(sizes.values())))
    return {k: min(1.0, per_group / n) for k, n in sizes.items()}, per_group

