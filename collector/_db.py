"""Storage: the SQLModel tables, engine setup, Alembic upgrade at open, and the store's queries.

One `Store` wraps one SQLAlchemy engine. SQLite (the default, in WAL mode with a busy timeout)
and Postgres go through the same code: the only dialect-specific piece is the idempotent insert,
which picks `sqlalchemy.dialects.{sqlite,postgresql}.insert(...).on_conflict_do_nothing()` by
dialect name. The schema is created and changed only by the Alembic migrations shipped in
`collector/migrations`; `open_store` runs `upgrade head` (a no-op when already current).

`Store.add_trajectories` anonymizes before it writes, so no caller can store raw text by going
around the HTTP API. Deliberately not here: dedup, diversity and curation (they read what this
stores), and any raw SQL string.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import registry
from sqlmodel import Field, Session, SQLModel, select

from sdk._types import Feedback, IngestResult, Trajectory

from . import _defaults
from ._anonymize import Anonymizer, default_anonymizer
from ._score import score_trajectory
from .errors import ConfigError, MigrationError, StorageError, UnknownTrajectoryError

_MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


class _CollectorModel(SQLModel, registry=registry()):
    """Base of the collector's tables, with its own metadata so that Alembic and the schema test
    see only the collector's tables, whatever else is registered in `SQLModel.metadata`."""


def utcnow() -> datetime:
    """Now, as the naive UTC datetime every timestamp column stores (SQLite keeps no zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def to_naive_utc(dt: datetime) -> datetime:
    """Convert an aware datetime to naive UTC; a naive one is taken to be UTC already."""
    return dt.astimezone(timezone.utc).replace(tzinfo=None) if dt.tzinfo is not None else dt


class TrajectoryRow(_CollectorModel, table=True):
    """One anonymized trajectory, plus the columns that queries filter and group on."""

    __tablename__ = "trajectories"

    id: str = Field(sa_type=sa.String(128), primary_key=True, description="client-generated trajectory id")
    app: str = Field(sa_type=sa.String(128), index=True)
    task_id: str = Field(sa_type=sa.String(256), index=True)
    model: str = Field(sa_type=sa.String(256))
    served_version: str | None = Field(default=None, sa_type=sa.String(256), index=True)
    success: bool | None = Field(default=None)
    reward: float | None = Field(default=None)
    score: float | None = Field(default=None)
    n_messages: int
    content_hash: str = Field(sa_type=sa.String(64), index=True, description="sha256 of normalized messages")
    # Plain DateTime holding naive UTC: SQLite has no zone type, and one convention everywhere
    # keeps keyset comparisons exact on both dialects.
    created_at: datetime = Field(sa_type=sa.DateTime(), index=True, description="ingest time, naive UTC")
    started_at: datetime = Field(sa_type=sa.DateTime())
    finished_at: datetime = Field(sa_type=sa.DateTime())
    data: str = Field(sa_type=sa.Text, description="the full anonymized trajectory as JSON")


class FeedbackRow(_CollectorModel, table=True):
    """Late user feedback on a trajectory (anonymized like trajectories)."""

    __tablename__ = "feedback"

    id: int | None = Field(default=None, primary_key=True)
    trajectory_id: str = Field(sa_type=sa.String(128), index=True)
    rating: float | None = Field(default=None)
    correction: str | None = Field(default=None, sa_type=sa.Text)
    text: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = Field(sa_type=sa.DateTime())


#: The collector's tables (what the migrations must produce).
metadata = _CollectorModel.metadata

_WS = re.compile(r"\s+")


def content_hash(traj: Trajectory) -> str:
    """sha256 of the messages with whitespace collapsed and tool-call ids dropped.

    Tool-call ids are random per run, so two episodes that said the same things hash the same.
    """
    norm = []
    for m in traj.messages:
        d: dict[str, Any] = {"role": m.role, "content": _WS.sub(" ", m.content).strip() if m.content else None}
        if m.tool_calls:
            d["tool_calls"] = [[tc.function.name, _WS.sub(" ", tc.function.arguments).strip()] for tc in m.tool_calls]
        if m.name:
            d["name"] = m.name
        norm.append(d)
    blob = json.dumps(norm, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _short(e: BaseException) -> str:
    """The driver's message without SQLAlchemy's echo of the statement and its parameters
    (which would put trajectory text into logs and HTTP responses)."""
    orig = getattr(e, "orig", None)
    return f"{type(orig or e).__name__}: {orig or e}".splitlines()[0]


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
        cur.execute("PRAGMA journal_mode=WAL")  # readers (export, stats) never block ingest
        cur.execute(f"PRAGMA busy_timeout={_defaults.SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable across app crashes in WAL mode
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def _alembic_config(engine_url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine_url.replace("%", "%%"))
    return cfg


def migrate(engine: Engine) -> str:
    """Run `alembic upgrade head` on `engine` (a no-op when current); returns the head revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _alembic_config(engine.url.render_as_string(hide_password=False))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": _defaults.ALEMBIC_VERSION_TABLE})
            rev = ctx.get_current_revision()
    except Exception as e:  # any driver/alembic failure: say which database and what to do
        raise MigrationError(
            f"could not migrate the collector database {engine.url.render_as_string(hide_password=True)} "
            f"to the latest schema: {e}. Check that the URL is reachable and writable; a database "
            "created by a newer looplift needs that version."
        ) from e
    return rev or ""


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what the HTTP API returns)."""
        from dataclasses import asdict

        return asdict(self)


class Store:
    """The collector's database: idempotent ingest, feedback, stats, and ordered reads.

    Create with `open_store(url)`, which also migrates. Thread-safe (one engine, a session per call).
    """

    def __init__(self, engine: Engine, anonymizer: Anonymizer | None = None) -> None:
        self.engine = engine
        self.anonymizer = anonymizer or default_anonymizer()

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    def close(self) -> None:
        """Dispose of the engine's connections."""
        self.engine.dispose()

    # -- writes ----------------------------------------------------------------------------

    def _insert(self) -> Any:
        if self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        elif self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            raise StorageError(f"unsupported database dialect {self.dialect!r}: use SQLite or PostgreSQL")
        return insert(TrajectoryRow)

    def add_trajectories(self, trajectories: Sequence[Trajectory], *, anonymize: bool = True) -> IngestResult:
        """Anonymize, score and store `trajectories` in one transaction, idempotently by id.

        Ids already stored (or repeated within the batch) count as duplicates and are not
        rewritten. `anonymize=False` is only for data that was anonymized already.

        Returns:
            `IngestResult` with `ids` listing every id of the batch, in order (all are now stored).
        """
        now = utcnow()
        rows = []
        for t in trajectories:
            if anonymize:
                t = self.anonymizer.trajectory(t)
            s = score_trajectory(t)
            rows.append(
                {
                    "id": t.id,
                    "app": t.app,
                    "task_id": t.task_id,
                    "model": t.model,
                    "served_version": t.served_version,
                    "success": s.success,
                    "reward": s.reward,
                    "score": s.score,
                    "n_messages": len(t.messages),
                    "content_hash": content_hash(t),
                    "created_at": now,
                    "started_at": to_naive_utc(t.started_at),
                    "finished_at": to_naive_utc(t.finished_at),
                    "data": t.model_dump_json(),
                }
            )
        if not rows:
            return IngestResult(accepted=0, duplicates=0, ids=[])
        stmt = self._insert().on_conflict_do_nothing(index_elements=["id"]).returning(TrajectoryRow.id)
        try:
            with self.engine.begin() as conn:
                inserted = set(conn.execute(stmt, rows).scalars().all())
        except sa.exc.SQLAlchemyError as e:
            raise StorageError(f"could not store {len(rows)} trajectories: {_short(e)}") from e
        return IngestResult(
            accepted=len(inserted), duplicates=len(rows) - len(inserted), ids=[r["id"] for r in rows]
        )

    def add_feedback(self, fb: Feedback, *, anonymize: bool = True) -> int:
        """Store feedback for a stored trajectory; returns the feedback row id.

        Raises:
            UnknownTrajectoryError: the trajectory id is not stored.
        """
        correction, text = fb.correction, fb.text
        if anonymize:  # one replacement map for both, like the strings of one trajectory
            correction, text = self.anonymizer.strings(correction, text)
        with Session(self.engine) as session:
            if session.get(TrajectoryRow, fb.trajectory_id) is None:
                raise UnknownTrajectoryError(fb.trajectory_id)
            row = FeedbackRow(
                trajectory_id=fb.trajectory_id, rating=fb.rating, correction=correction, text=text, created_at=utcnow()
            )
            session.add(row)
            session.commit()
            assert row.id is not None
            return row.id

    # -- reads -----------------------------------------------------------------------------

    def get(self, trajectory_id: str) -> Trajectory | None:
        """The stored (anonymized) trajectory, or None."""
        with Session(self.engine) as session:
            row = session.get(TrajectoryRow, trajectory_id)
            return Trajectory.model_validate_json(row.data) if row else None

    def feedback_for(self, trajectory_id: str) -> list[FeedbackRow]:
        """All feedback rows joined to `trajectory_id`, oldest first."""
        with Session(self.engine) as session:
            q = select(FeedbackRow).where(FeedbackRow.trajectory_id == trajectory_id).order_by(FeedbackRow.id)
            return list(session.exec(q).all())

    def count(self) -> int:
        """Number of stored trajectories."""
        with Session(self.engine) as session:
            return int(session.exec(select(sa.func.count()).select_from(TrajectoryRow)).one())

    def _group(self, session: Session, key: Any = None) -> Iterable[tuple[Any, ...]]:
        t = TrajectoryRow
        cols = [
            sa.func.count(),
            sa.func.count(t.success),
            sa.func.coalesce(sa.func.sum(sa.case((t.success.is_(True), 1), else_=0)), 0),  # type: ignore[union-attr]
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
        return CollectorStats(
            total=total.total,
            with_outcome=total.with_outcome,
            successes=total.successes,
            mean_reward=total.mean_reward,
            feedback=n_fb,
            by_app=by_app,
            by_served_version=by_ver,
        )

    def iter_rows(
        self,
        *,
        min_reward: float | None = None,
        app: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
        batch_size: int = _defaults.EXPORT_BATCH_SIZE,
    ) -> Iterator[tuple[str, datetime, str]]:
        """Yield `(id, created_at, data)` in (created_at, id) order, one page per query.

        Keyset pagination: each page is a short read that resumes after the last (created_at, id)
        seen, so memory stays bounded and no transaction is held open across the whole export.
        `since` is inclusive, `until` exclusive; both compare with the ingest time.
        """
        t = TrajectoryRow
        base = sa.select(t.id, t.created_at, t.data)
        if min_reward is not None:
            base = base.where(t.reward >= min_reward)  # type: ignore[operator]
        if app is not None:
            base = base.where(t.app == app)
        if since is not None:
            base = base.where(t.created_at >= to_naive_utc(since))
        if until is not None:
            base = base.where(t.created_at < to_naive_utc(until))
        base = base.order_by(t.created_at, t.id)
        last: tuple[datetime, str] | None = None
        emitted = 0
        while limit is None or emitted < limit:
            n = batch_size if limit is None else min(batch_size, limit - emitted)
            q = base
            if last is not None:
                q = q.where(sa.or_(t.created_at > last[0], sa.and_(t.created_at == last[0], t.id > last[1])))
            with self.engine.connect() as conn:
                page = conn.execute(q.limit(n)).all()
            yield from ((rid, created, data) for rid, created, data in page)
            emitted += len(page)
            if len(page) < n:
                return
            last = (page[-1][1], page[-1][0])


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
