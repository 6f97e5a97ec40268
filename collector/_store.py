"""`Store`: the collector's database as one object, and `open_store`, which opens and migrates it.

One `Store` wraps one SQLAlchemy engine (`_engine.py`); SQLite (the default, WAL) and Postgres go
through the same code. Its jobs, each in its own module where it is more than a query:

- ingest: `add_trajectories` (`_ingest.py`: anonymize, score, hash, one transaction per batch);
- feedback: `add_feedback`, anonymized, its score recomposed in the same transaction;
- scoring state: `recompose_scores`, `save_score_model`, `score_model` (`_score.py`, `_curate.py`);
- retention: `purge` (`_purge.py`);
- reads: `get`, `feedback_for`, `count`, `window_stats`, `stats`.

Everything that writes text anonymizes it first, so no caller can store raw text by going around
the HTTP API. Thread-safe: one engine, a connection or session per call. Deliberately not here:
dedup, diversity and curation (they read what this stores: `_export.py`, `_curate.py`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from sdk import Feedback, IngestResult, Trajectory

from . import _capture_rows, _defaults, _ingest, _purge
from ._anonymize import Anonymizer, default_anonymizer
from ._engine import make_engine, storage_error
from ._migrate import migrate
from ._purge import PurgeResult
from ._schema import FeedbackRow, ScoreModelRow, TrajectoryRow, to_naive_utc, utcnow
from ._score import SOURCES, score_sql
from .errors import UnknownResponseError, UnknownTrajectoryError


@dataclass(frozen=True)
class GroupStats:
    """Counts for one app or one served version."""

    total: int
    with_outcome: int
    successes: int
    mean_reward: float | None


@dataclass(frozen=True)
class CollectorStats:
    """What `GET /v1/stats` and `collector stats` report."""

    total: int
    with_outcome: int
    successes: int
    mean_reward: float | None
    feedback: int
    by_app: dict[str, GroupStats]
    by_served_version: dict[str, GroupStats]
    #: rows per source of their final score (`_score.compose`), `none` for unscored rows
    score_sources: dict[str, int] = field(default_factory=dict)
    #: rows the quality model has scored (whatever decided their final score)
    quality_scored: int = 0
    #: the current quality model: id, created_at, held-out AUC, train/held-out sizes
    quality_model: dict[str, Any] | None = None
    #: distinct diversity clusters in use
    clusters: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the HTTP API returns)."""
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class WindowStats:
    """Counts over the trajectories one query selects (an app, a served version, an ingest-time window):
    what the trainer's scheduler reads for its new-data and drift triggers."""

    total: int
    #: rows with a final score (`score` not null)
    scored: int
    #: rows whose verifier decided success or failure
    with_outcome: int
    successes: int
    #: rows with at least one user rating
    with_feedback: int
    #: mean user rating in [-1, 1] over `with_feedback` rows
    mean_feedback: float | None

    @property
    def success_rate(self) -> float | None:
        """successes / with_outcome, or None without outcomes."""
        return self.successes / self.with_outcome if self.with_outcome else None


class Store:
    """The collector's database: idempotent ingest, feedback, stats, and ordered reads.

    Create with `open_store(url)`, which also migrates. Thread-safe (one engine, a session per call).
    """

    def __init__(self, engine: Engine, anonymizer: Anonymizer | None = None) -> None:
        self.engine = engine
        self.anonymizer = anonymizer or default_anonymizer()
        #: Called after a commit with the stored rows (`add_trajectories`: the inserted rows' dicts, anonymized
        #: `data` included) or `("feedback", row dict)`; the Langfuse exporter listens here. Must not block.
        self.listeners: list[Callable[[str, Any], None]] = []

    def _notify(self, what: str, payload: Any) -> None:
        for listener in self.listeners:
            try:
                listener(what, payload)
            except Exception:  # an observer must never fail a write that already committed
                logging.getLogger("looplift.collector").exception("store listener failed")

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    def close(self) -> None:
        """Dispose of the engine's connections."""
        self.engine.dispose()

    # -- writes ----------------------------------------------------------------------------

    def add_trajectories(self, trajectories: Sequence[Trajectory], *, anonymize: bool = True) -> IngestResult:
        """Anonymize, score and store `trajectories` in one transaction, idempotently by id.

        Ids already stored (or repeated within the batch) count as duplicates and are not
        rewritten: within a batch the first occurrence wins. Ids already stored are looked up
        first and skip the anonymizer (a client retrying a batch costs one indexed read). The
        whole batch commits in one transaction before this returns, so a caller that got the
        result back (an HTTP 200) holds a durable acknowledgement, and a crash before the commit
        leaves none of the batch behind. `anonymize=False` is only for data that was anonymized
        already.

        Returns:
            `IngestResult` with `ids` listing every id of the batch, in order (all are now stored).
        """
        on_stored = (lambda rows: self._notify("trajectories", rows)) if self.listeners else None
        return _ingest.add_trajectories(self.engine, self.anonymizer if anonymize else None, trajectories, on_stored,
                                        lambda where: self._recompose(where, with_rating=True))

    def resolve_response(self, response_id: str) -> str | None:
        """The id of the trajectory holding the captured completion `response_id`, or None."""
        with self.engine.connect() as conn:
            return _capture_rows.resolve(conn, response_id)

    def add_feedback(self, fb: Feedback, *, anonymize: bool = True) -> tuple[int, str]:
        """Store feedback for a stored trajectory (named by its id, or by a captured completion's
        `response_id`, looked up here and only here, and kept on the row); returns the feedback row id and
        the id of the trajectory it joined.

        Raises:
            UnknownTrajectoryError: the trajectory id is not stored.
            UnknownResponseError: no stored trajectory holds that response id.
            ValueError: `fb` names neither a trajectory nor a response (only a `Feedback` built without
                validation can).
        """
        name = fb.trajectory_id or fb.response_id
        if name is None:
            raise ValueError("feedback names no trajectory: give exactly one of trajectory_id or response_id "
                             "(build it with Feedback(...), which checks this)")
        correction, text = fb.correction, fb.text
        if anonymize:  # one replacement map for both, like the strings of one trajectory
            correction, text = self.anonymizer.strings(correction, text)
        t, f = TrajectoryRow, FeedbackRow
        target = fb.trajectory_id
        try:
            # Read-then-write in one transaction: on SQLite it must hold the write lock from the
            # start (IMMEDIATE), or a batch committed by ingest between the two fails the insert
            # with "database is locked" at once (a third of feedback under load, measured).
            with self.engine.connect() as conn, conn.execution_options(sqlite_immediate=True).begin():
                if target is None:
                    target = _capture_rows.resolve(conn, name)
                    if target is None:
                        raise UnknownResponseError(name)
                if conn.execute(sa.select(col(t.id)).where(col(t.id) == target)).first() is None:
                    raise UnknownTrajectoryError(target)
                # `response_id` names the completion a correction replaces at export (`_export_correction`).
                values = {"trajectory_id": target, "rating": fb.rating, "correction": correction, "text": text,
                          "created_at": utcnow(), "key_id": fb.key_id, "response_id": fb.response_id}
                new_id = conn.execute(sa.insert(f).values(**values).returning(col(f.id))).scalar_one()
                assert new_id is not None  # the database assigns it
                fid = int(new_id)
                # The same transaction recomposes the trajectory's score with the new rating.
                conn.execute(self._recompose(col(t.id) == target, with_rating=True))
        except sa.exc.SQLAlchemyError as e:
            raise storage_error(f"could not store feedback for trajectory {target!r}", e) from e
        if self.listeners:
            self._notify("feedback", values | {"id": fid})
        return fid, target

    # -- deletes ---------------------------------------------------------------------------

    def purge(
        self,
        *,
        before: datetime | None = None,
        where: Mapping[str, str] | None = None,
        dry_run: bool = False,
        batch_size: int = _defaults.PURGE_BATCH_SIZE,
    ) -> PurgeResult:
        """Delete the trajectories ingested before `before` and/or whose metadata matches `where`,
        with their feedback.

        Conditions combine with AND. `where` maps metadata keys to values compared with the stored
        (anonymized) metadata as text; see `_purge.check_metadata_match` for values that are refused.
        Deletes run in transactions of `batch_size` trajectories, each removing the trajectories
        and their feedback together, so ingest waits at most one short transaction for the SQLite
        write lock. On SQLite `secure_delete` zeroes the freed pages and the write-ahead log is
        truncated afterwards, so the deleted text is gone from the database files; on Postgres
        the rows stay in the table's storage until VACUUM reuses it (and in any backups).

        Args:
            before: delete trajectories ingested strictly before this (naive = UTC).
            where: delete trajectories with `metadata[KEY] == VALUE` for every item.
            dry_run: count what would be deleted, delete nothing.

        Raises:
            ConfigError: no condition, or a `where` item that cannot select one user's data.
            StorageError: the database failed (deletions committed so far stay deleted).
        """
        return _purge.purge(self.engine, before=before, where=where, dry_run=dry_run, batch_size=batch_size)

    # -- scores ----------------------------------------------------------------------------

    def _recompose(self, where: sa.ColumnElement[bool], *, with_rating: bool) -> sa.Update:
        t = TrajectoryRow
        values: dict[str, Any] = {}
        rating: Any = t.feedback_rating
        if with_rating:
            f = FeedbackRow
            rating = sa.select(sa.func.avg(f.rating)).where(col(f.trajectory_id) == t.id).scalar_subquery()
            values["feedback_rating"] = rating
        score, source = score_sql(t.reward, rating, t.quality)
        return sa.update(t).where(where).values(score=score, score_source=source, **values)

    def recompose_scores(self) -> int:
        """Recompute every row's `feedback_rating`, `score` and `score_source` (one UPDATE); returns rows touched."""
        with self.engine.begin() as conn:
            return int(conn.execute(self._recompose(sa.true(), with_rating=True)).rowcount or 0)

    def save_score_model(self, kind: str, params: dict[str, Any], *, auc: float | None, n_train: int, n_test: int) -> int:
        """Store a fitted model's parameters (JSON); the newest of each `kind` is the current one."""
        with Session(self.engine) as session:
            row = ScoreModelRow(kind=kind, created_at=utcnow(), auc=auc, n_train=n_train, n_test=n_test,
                                params=json.dumps(params, separators=(",", ":")))
            session.add(row)
            session.commit()
            assert row.id is not None
            return row.id

    def score_model(self, kind: str) -> ScoreModelRow | None:
        """The newest stored model of `kind` (`quality` or `cluster`), or None."""
        with Session(self.engine) as session:
            q = select(ScoreModelRow).where(col(ScoreModelRow.kind) == kind).order_by(col(ScoreModelRow.id).desc()).limit(1)
            return session.exec(q).first()

    # -- reads -----------------------------------------------------------------------------

    def get(self, trajectory_id: str) -> Trajectory | None:
        """The stored (anonymized) trajectory, or None."""
        with Session(self.engine) as session:
            row = session.get(TrajectoryRow, trajectory_id)
            return Trajectory.model_validate_json(row.data) if row else None

    def feedback_for(self, trajectory_id: str) -> list[FeedbackRow]:
        """All feedback rows joined to `trajectory_id`, oldest first."""
        with Session(self.engine) as session:
            q = select(FeedbackRow).where(col(FeedbackRow.trajectory_id) == trajectory_id).order_by(col(FeedbackRow.id))
            return list(session.exec(q).all())

    def count(self) -> int:
        """Number of stored trajectories."""
        with Session(self.engine) as session:
            return int(session.exec(select(sa.func.count()).select_from(TrajectoryRow)).one())

    def ingest_mark(self) -> int:
        """Where ingest has got to: the highest ingest number stored (0 when empty). The rows stored or
        replaced after this call are those `window_stats(after_mark=...)` counts, whatever the clocks did."""
        with Session(self.engine) as session:
            top = session.execute(sa.select(sa.func.max(col(TrajectoryRow.ingest_seq)))).scalar()
            return int(top or 0)

    def window_stats(
        self,
        *,
        app: str | None = None,
        served_version: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after_mark: int | None = None,
    ) -> WindowStats:
        """Counts over the trajectories of `app` served by `served_version`, ingested in [since, until)
        (None: no bound; naive datetimes are UTC) and after `ingest_mark()` returned `after_mark`. One
        aggregate query on indexed columns."""
        t = TrajectoryRow
        cond: list[sa.ColumnElement[bool]] = [sa.true()]
        if after_mark is not None:
            cond.append(col(t.ingest_seq) > after_mark)
        if app is not None:
            cond.append(col(t.app) == app)
        if served_version is not None:
            cond.append(col(t.served_version) == served_version)
        if since is not None:
            cond.append(col(t.created_at) >= to_naive_utc(since))
        if until is not None:
            cond.append(col(t.created_at) < to_naive_utc(until))
        q = sa.select(
            sa.func.count(),
            sa.func.count(col(t.score)),
            sa.func.count(col(t.success)),
            sa.func.coalesce(sa.func.sum(sa.case((col(t.success).is_(True), 1), else_=0)), 0),
            sa.func.count(col(t.feedback_rating)),
            sa.func.avg(t.feedback_rating),
        ).where(*cond)
        with Session(self.engine) as session:
            r = session.execute(q).one()
        return WindowStats(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]),
                           float(r[5]) if r[5] is not None else None)

    def _group(self, session: Session, key: Any = None) -> Iterable[tuple[Any, ...]]:
        t = TrajectoryRow
        cols = [
            sa.func.count(),
            sa.func.count(col(t.success)),
            sa.func.coalesce(sa.func.sum(sa.case((col(t.success).is_(True), 1), else_=0)), 0),
            sa.func.avg(t.reward),
        ]
        if key is None:
            return [tuple(session.execute(sa.select(*cols)).one())]
        return [tuple(r) for r in session.execute(sa.select(key, *cols).group_by(key).order_by(key)).all()]

    def stats(self) -> CollectorStats:
        """Totals, outcomes, successes and mean reward, overall, per app and per served version."""

        def g(r: tuple[Any, ...]) -> GroupStats:
            return GroupStats(int(r[0]), int(r[1]), int(r[2]), float(r[3]) if r[3] is not None else None)

        with Session(self.engine) as session:
            total = g(self._group(session)[0])  # type: ignore[index]
            by_app = {str(r[0]): g(r[1:]) for r in self._group(session, TrajectoryRow.app)}
            by_ver = {str(r[0]) if r[0] is not None else "unknown": g(r[1:]) for r in self._group(session, TrajectoryRow.served_version)}
            n_fb = int(session.exec(select(sa.func.count()).select_from(FeedbackRow)).one())
            t = TrajectoryRow
            by_src: dict[str | None, int] = dict(
                session.execute(sa.select(col(t.score_source), sa.func.count()).group_by(t.score_source)).tuples().all())
            sources = {k: int(by_src.get(k, 0)) for k in SOURCES} | {"none": int(by_src.get(None, 0))}
            n_quality = int(session.execute(sa.select(sa.func.count(col(t.quality)))).scalar_one())
            n_clusters = int(session.execute(sa.select(sa.func.count(sa.distinct(col(t.cluster))))).scalar_one())
        qm = self.score_model("quality")
        quality_model = None if qm is None else {
            "id": qm.id, "created_at": qm.created_at.isoformat(), "auc": qm.auc, "n_train": qm.n_train, "n_test": qm.n_test}
        return CollectorStats(
            total=total.total,
            with_outcome=total.with_outcome,
            successes=total.successes,
            mean_reward=total.mean_reward,
            feedback=n_fb,
            by_app=by_app,
            by_served_version=by_ver,
            score_sources=sources,
            quality_scored=n_quality,
            quality_model=quality_model,
            clusters=n_clusters,
        )


def open_store(db_url: str, *, migrate_schema: bool = True, anonymizer: Anonymizer | None = None) -> Store:
    """Open (creating if needed) the collector database at `db_url` and upgrade its schema.

    Raises:
        StorageError / MigrationError: with the URL and what to check.
    """
    engine = make_engine(db_url)
    if migrate_schema:
        try:
            migrate(engine)
        except Exception:
            engine.dispose()
            raise
    return Store(engine, anonymizer)
