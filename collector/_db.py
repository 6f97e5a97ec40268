"""Storage: the SQLModel tables, engine setup, Alembic upgrade at open, and the store's queries.

One `Store` wraps one SQLAlchemy engine. SQLite (the default, in WAL mode with a busy timeout)
and Postgres go through the same code: the only dialect-specific piece is the idempotent insert,
which picks `sqlalchemy.dialects.{sqlite,postgresql}.insert(...).on_conflict_do_nothing()` by
dialect name. The schema is created and changed only by the Alembic migrations shipped in
`collector/migrations`; `open_store` runs `upgrade head` (a no-op when already current).

`Store.add_trajectories` anonymizes before it writes, so no caller can store raw text by going
around the HTTP API, and commits each batch in one transaction before it returns. `Store.purge`
is retention and per-user deletion (by ingest age and/or a metadata key), in short batches.
Deliberately not here: dedup, diversity and curation (they read what this stores), and raw SQL
beyond SQLite's PRAGMAs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import registry
from sqlmodel import Field, Session, SQLModel, select

from sdk import Feedback, IngestResult, Trajectory

from . import _capture_rows, _defaults
from ._anonymize import Anonymizer, anonymize_text, default_anonymizer
from ._score import SOURCES, score_sql, score_trajectory
from .errors import ConfigError, MigrationError, StorageError, UnknownResponseError, UnknownTrajectoryError

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
    # Export reads in (created_at, id) or (task_id, created_at, id) keyset order: these indexes make
    # each page a range scan (they replace 0001's single-column created_at and task_id indexes).
    __table_args__ = (
        sa.Index("ix_trajectories_created_at_id", "created_at", "id"),
        sa.Index("ix_trajectories_task_created_id", "task_id", "created_at", "id"),
    )

    id: str = Field(sa_type=sa.String(128), primary_key=True, description="client-generated trajectory id")
    app: str = Field(sa_type=sa.String(128), index=True)
    task_id: str = Field(sa_type=sa.String(256))
    model: str = Field(sa_type=sa.String(256))
    served_version: str | None = Field(default=None, sa_type=sa.String(256), index=True)
    success: bool | None = Field(default=None)
    reward: float | None = Field(default=None)
    score: float | None = Field(default=None, index=True, description="final score, composed by _score.compose")
    n_messages: int
    content_hash: str = Field(sa_type=sa.String(64), index=True, description="sha256 of normalized messages")
    # Plain DateTime holding naive UTC: SQLite has no zone type, and one convention everywhere
    # keeps keyset comparisons exact on both dialects.
    created_at: datetime = Field(sa_type=sa.DateTime(), description="ingest time, naive UTC")
    started_at: datetime = Field(sa_type=sa.DateTime())
    finished_at: datetime = Field(sa_type=sa.DateTime())
    data: str = Field(sa_type=sa.Text, description="the full anonymized trajectory as JSON")
    feedback_rating: float | None = Field(default=None, description="mean user rating in [-1, 1]")
    quality: float | None = Field(default=None, description="learned P(success), by `collector score`")
    score_source: str | None = Field(default=None, sa_type=sa.String(16), description="what decided `score`")
    cluster: int | None = Field(default=None, index=True, description="diversity cluster, by `collector score`")
    pii: str | None = Field(default=None, sa_type=sa.Text, description='values replaced at ingest per kind, JSON {"EMAIL": 2}')


class FeedbackRow(_CollectorModel, table=True):
    """Late user feedback on a trajectory (anonymized like trajectories)."""

    __tablename__ = "feedback"

    id: int | None = Field(default=None, primary_key=True)
    trajectory_id: str = Field(sa_type=sa.String(128), index=True)
    rating: float | None = Field(default=None)
    correction: str | None = Field(default=None, sa_type=sa.Text)
    text: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = Field(sa_type=sa.DateTime())
    key_id: str | None = Field(default=None, sa_type=sa.String(64), description="the gateway API key that sent it")


class ResponseIdRow(_CollectorModel, table=True):
    """A captured completion's id -> the trajectory holding it (from `metadata.response_ids`, `_capture_rows`)."""

    __tablename__ = "response_ids"

    response_id: str = Field(sa_type=sa.String(256), primary_key=True)
    trajectory_id: str = Field(sa_type=sa.String(128), index=True)


class ScoreModelRow(_CollectorModel, table=True):
    """A fitted quality model or clusterer, as JSON (`_quality.py`, `_cluster.py`); newest wins."""

    __tablename__ = "score_models"

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(sa_type=sa.String(32), index=True, description="`quality` or `cluster`")
    created_at: datetime = Field(sa_type=sa.DateTime())
    auc: float | None = Field(default=None, description="held-out ROC AUC (quality models)")
    n_train: int
    n_test: int
    params: str = Field(sa_type=sa.Text, description="the fitted parameters as JSON")


#: The collector's tables (what the migrations must produce).
metadata = _CollectorModel.metadata

def content_hash(traj: Trajectory) -> str:
    """sha256 of the messages with whitespace collapsed and tool-call ids dropped.

    Tool-call ids are random per run, so two episodes that said the same things hash the same.
    """
    norm = []
    for m in traj.messages:
        # " ".join(s.split()) is exactly `\s+` -> " " then strip (both split on str.isspace), and
        # several times faster on prose than the regex, which took a fifth of ingest time.
        d: dict[str, Any] = {"role": m.role, "content": " ".join(m.content.split()) if m.content else None}
        if m.tool_calls:
            d["tool_calls"] = [[tc.function.name, " ".join(tc.function.arguments.split())] for tc in m.tool_calls]
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
        # IMMEDIATE (asked for with the `sqlite_immediate` execution option) takes the write lock
        # up front, waiting up to the busy timeout: a deferred transaction that reads first (the
        # migration reads the version table) would fail with "database is locked" at its first
        # write when another process got there between, instead of waiting.
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _alembic_config(engine_url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", engine_url.replace("%", "%%"))
    return cfg


_MIGRATE_LOCK = threading.Lock()


def migrate(engine: Engine) -> str:
    """Run `alembic upgrade head` on `engine` (a no-op when current); returns the head revision."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    cfg = _alembic_config(engine.url.render_as_string(hide_password=False))
    try:
        # Several workers or replicas may start on a fresh database at once: on SQLite the write
        # lock (IMMEDIATE) serializes them, on Postgres the advisory lock in migrations/env.py;
        # the later ones find the schema at head and do nothing.
        # Alembic keeps its `context` in module globals: one migration per process at a time.
        with _MIGRATE_LOCK, engine.connect() as conn, conn.execution_options(sqlite_immediate=True).begin():
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

    def _insert(self, table: Any = None) -> Any:
        if self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        elif self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            raise StorageError(f"unsupported database dialect {self.dialect!r}: use SQLite or PostgreSQL")
        return insert(TrajectoryRow if table is None else table)

    def add_trajectories(self, trajectories: Sequence[Trajectory], *, anonymize: bool = True) -> IngestResult:
        """Anonymize, score and store `trajectories` in one transaction, idempotently by id.

        Ids already stored (or repeated within the batch) count as duplicates and are not
        rewritten: within a batch the first occurrence wins. The one exception is a revisable
        trajectory (a session the gateway captured, which grows with every exchange and is re-sent
        under the same id, see `_capture_rows`): one with more messages than the stored row replaces
        it (its feedback stays joined, its score is recomposed with it) and counts as accepted. Ids
        already stored are looked up first and skip the anonymizer (a client retrying a batch costs
        one indexed read). The whole batch commits in one transaction before this returns, so a
        caller that got the result back (an HTTP 200) holds a durable acknowledgement, and a crash
        before the commit leaves none of the batch behind. `anonymize=False` is only for data that
        was anonymized already. The ids listed in `metadata.response_ids` are linked to the
        trajectory so that feedback can name them (`add_feedback`).

        Returns:
            `IngestResult` with `ids` listing every id of the batch, in order (all are now stored).
        """
        ids = [t.id for t in trajectories]
        if not ids:
            return IngestResult(accepted=0, duplicates=0, ids=[])
        unique: dict[str, Trajectory] = {}
        for t in trajectories:
            kept = unique.get(t.id)
            if kept is None or (_capture_rows.revisable(t) and len(t.messages) > len(kept.messages)):
                unique[t.id] = t  # of a session's revisions in one batch, the longest
        t_ = TrajectoryRow
        try:
            with self.engine.connect() as conn:
                q = sa.select(t_.id, t_.n_messages).where(t_.id.in_(list(unique)))  # type: ignore[attr-defined]
                stored = dict(conn.execute(q).tuples().all())
        except sa.exc.SQLAlchemyError as e:
            raise StorageError(f"could not store {len(ids)} trajectories: {_short(e)}") from e
        now = utcnow()
        rows = [self._row(t, now, anonymize) for tid, t in unique.items() if tid not in stored]
        grown = [self._row(t, now, anonymize) for tid, t in unique.items()
                 if tid in stored and _capture_rows.revisable(t) and len(t.messages) > stored[tid]]
        inserted: set[str] = set()
        replaced: list[str] = []
        if rows or grown:
            # One multi-row INSERT .. ON CONFLICT DO NOTHING .. RETURNING (SQLAlchemy's
            # insertmanyvalues); a concurrent request that stored an id in between is a duplicate.
            stmt = self._insert().on_conflict_do_nothing(index_elements=["id"]).returning(TrajectoryRow.id)
            try:
                with self.engine.begin() as conn:
                    if rows:
                        inserted = set(conn.execute(stmt, rows).scalars().all())
                    if grown:
                        replaced = _capture_rows.replace_grown(conn, grown)
                        conn.execute(self._recompose(t_.id.in_(replaced), with_rating=True))  # type: ignore[attr-defined]
                    _capture_rows.link_responses(conn, self._insert(ResponseIdRow),
                                                 [unique[i] for i in (*inserted, *replaced)])
            except sa.exc.SQLAlchemyError as e:
                raise StorageError(f"could not store {len(ids)} trajectories: {_short(e)}") from e
            if self.listeners and (inserted or replaced):
                done = inserted | set(replaced)
                self._notify("trajectories", [r for r in rows + grown if r["id"] in done])
        accepted = len(inserted) + len(replaced)
        return IngestResult(accepted=accepted, duplicates=len(ids) - accepted, ids=ids)

    def _row(self, t: Trajectory, now: datetime, anonymize: bool) -> dict[str, Any]:
        pii: dict[str, int] = {}
        if anonymize:
            t, found = self.anonymizer.trajectory_entities(t)
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

    def resolve_response(self, response_id: str) -> str | None:
        """The id of the trajectory holding the captured completion `response_id`, or None."""
        with self.engine.connect() as conn:
            return _capture_rows.resolve(conn, response_id)

    def add_feedback(self, fb: Feedback, *, anonymize: bool = True) -> int:
        """Store feedback for a stored trajectory (named by its id, or by a captured completion's
        `response_id`); returns the feedback row id.

        Raises:
            UnknownTrajectoryError: the trajectory id is not stored.
            UnknownResponseError: no stored trajectory holds that response id.
        """
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
                    assert fb.response_id is not None  # Feedback validates: exactly one of the two
                    target = _capture_rows.resolve(conn, fb.response_id)
                    if target is None:
                        raise UnknownResponseError(fb.response_id)
                if conn.execute(sa.select(t.id).where(t.id == target)).first() is None:
                    raise UnknownTrajectoryError(target)
                values = {"trajectory_id": target, "rating": fb.rating, "correction": correction, "text": text,
                          "created_at": utcnow(), "key_id": fb.key_id}
                fid = int(conn.execute(sa.insert(f).values(**values).returning(f.id)).scalar_one())
                # The same transaction recomposes the trajectory's score with the new rating.
                conn.execute(self._recompose(t.id == target, with_rating=True))
        except sa.exc.SQLAlchemyError as e:
            raise StorageError(f"could not store feedback for trajectory {target!r}: {_short(e)}") from e
        if self.listeners:
            self._notify("feedback", values | {"id": fid})
        return fid

    # -- deletes ---------------------------------------------------------------------------

    def _metadata_text(self, key: str) -> Any:
        """SQL for `metadata[key]` of the stored JSON as text (numbers as their digits), or NULL.

        The `data` column is JSON text on both dialects, so this parses each row's JSON: a full
        scan whose cost grows with the table (measured: ~0.5-2 s per 100k rows of 4 KB on SQLite,
        ~5-7 s on Postgres, where the JSON is TOASTed). An index would need a migration: an
        expression index on one key, or a user-key column filled at ingest.
        """
        t = TrajectoryRow
        if self.dialect == "postgresql":
            doc = sa.cast(t.data, sa.JSON)  # json, not jsonb: measured no slower, and no binary copy built
            return doc.op("->", return_type=sa.JSON)("metadata").op("->>", return_type=sa.Text)(sa.literal(key))
        path = '$.metadata."' + key + '"'  # check_metadata_match rejected keys with quotes
        return sa.cast(sa.func.json_extract(t.data, path), sa.Text)

    def _purge_condition(self, before: datetime | None, where: Mapping[str, str]) -> Any:
        t = TrajectoryRow
        conds = []
        if before is not None:
            conds.append(t.created_at < to_naive_utc(before))
        for key, value in where.items():
            check_metadata_match(key, value)
            conds.append(self._metadata_text(key) == value)
        if not conds:
            raise ConfigError("purge needs a cutoff (--older-than) or a metadata match (--where KEY=VALUE); "
                              "refusing to delete everything")
        return sa.and_(*conds)

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
        (anonymized) metadata as text; see `check_metadata_match` for values that are refused.
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
        where = dict(where or {})
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        cond = self._purge_condition(before, where)
        t, f = TrajectoryRow, FeedbackRow
        cutoff = to_naive_utc(before) if before is not None else None
        try:
            if dry_run:
                with self.engine.connect() as conn:
                    n_t = conn.execute(sa.select(sa.func.count()).select_from(t).where(cond)).scalar_one()
                    matching = sa.select(t.id).where(cond)
                    n_f = conn.execute(
                        sa.select(sa.func.count()).select_from(f).where(f.trajectory_id.in_(matching))  # type: ignore[attr-defined]
                    ).scalar_one()
                return PurgeResult(int(n_t), int(n_f), True, cutoff, where)
            return self._purge_batches(cond, cutoff, where, batch_size)
        except sa.exc.SQLAlchemyError as e:
            raise StorageError(f"purge failed: {_short(e)}") from e

    def _matching_ids(self, cond: Any, batch_size: int) -> Iterator[list[str]]:
        """The ids matching `cond`, `batch_size` at a time, in one pass over the table.

        SQLite: keyset pages in primary-key order, each its own short read, so no reader pins the
        write-ahead log while the deletes run (it would grow by every deleted page). Postgres: one
        server-side cursor over a sequential scan (an ordered scan would fetch every row through
        the index, twice as slow here on TOASTed JSON); MVCC lets it read while rows are deleted.
        Rows are never updated, so an id read once stays a valid target either way.
        """
        t = TrajectoryRow
        if self.dialect == "postgresql":
            with self.engine.connect() as reader:
                result = reader.execution_options(stream_results=True, yield_per=batch_size).execute(sa.select(t.id).where(cond))
                for part in result.partitions(batch_size):
                    yield [row[0] for row in part]
            return
        last = ""
        while True:
            with self.engine.connect() as reader:
                ids = list(reader.execute(sa.select(t.id).where(cond, t.id > last).order_by(t.id).limit(batch_size)).scalars())
            if ids:
                yield ids
            if len(ids) < batch_size:
                return
            last = ids[-1]

    def _purge_batches(self, cond: Any, cutoff: datetime | None, where: dict[str, str], batch_size: int) -> PurgeResult:
        t, f = TrajectoryRow, FeedbackRow
        sqlite = self.dialect == "sqlite"
        n_t = n_f = 0
        with self.engine.connect() as writer:
            if sqlite:
                writer.exec_driver_sql("PRAGMA secure_delete=ON")  # this connection zeroes what it frees
                writer.commit()
            try:
                for ids in self._matching_ids(cond, batch_size):
                    # A trajectory and its feedback go together, in one short transaction.
                    with writer.begin():
                        n_f += writer.execute(sa.delete(f).where(f.trajectory_id.in_(ids))).rowcount  # type: ignore[attr-defined]
                        writer.execute(sa.delete(ResponseIdRow).where(ResponseIdRow.trajectory_id.in_(ids)))  # type: ignore[attr-defined]
                        n_t += writer.execute(sa.delete(t).where(t.id.in_(ids))).rowcount  # type: ignore[attr-defined]
            finally:
                if sqlite:
                    writer.rollback()
                    writer.exec_driver_sql("PRAGMA secure_delete=OFF")
                    writer.commit()
        wal_truncated = self._truncate_wal() if sqlite and n_t else None
        return PurgeResult(n_t, n_f, False, cutoff, where, wal_truncated)

    def _truncate_wal(self) -> bool:
        """Checkpoint the WAL into the database file and truncate it (old page images of deleted
        rows would otherwise linger in the -wal file until overwritten)."""
        with self.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            busy, _log, _done = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return busy == 0

    def _recompose(self, where: Any, *, with_rating: bool) -> Any:
        t = TrajectoryRow
        values: dict[str, Any] = {}
        rating: Any = t.feedback_rating
        if with_rating:
            f = FeedbackRow
            rating = sa.select(sa.func.avg(f.rating)).where(f.trajectory_id == t.id).scalar_subquery()
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
            q = select(ScoreModelRow).where(ScoreModelRow.kind == kind).order_by(ScoreModelRow.id.desc()).limit(1)  # type: ignore[union-attr]
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
            q = select(FeedbackRow).where(FeedbackRow.trajectory_id == trajectory_id).order_by(FeedbackRow.id)
            return list(session.exec(q).all())

    def count(self) -> int:
        """Number of stored trajectories."""
        with Session(self.engine) as session:
            return int(session.exec(select(sa.func.count()).select_from(TrajectoryRow)).one())

    def window_stats(
        self,
        *,
        app: str | None = None,
        served_version: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> WindowStats:
        """Counts over the trajectories of `app` served by `served_version`, ingested in [since, until)
        (None: no bound; naive datetimes are UTC). One aggregate query on indexed columns."""
        t = TrajectoryRow
        cond = [sa.true()]
        if app is not None:
            cond.append(t.app == app)
        if served_version is not None:
            cond.append(t.served_version == served_version)
        if since is not None:
            cond.append(t.created_at >= to_naive_utc(since))
        if until is not None:
            cond.append(t.created_at < to_naive_utc(until))
        q = sa.select(
            sa.func.count(),
            sa.func.count(t.score),
            sa.func.count(t.success),
            sa.func.coalesce(sa.func.sum(sa.case((t.success.is_(True), 1), else_=0)), 0),  # type: ignore[union-attr]
            sa.func.count(t.feedback_rating),
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
            t = TrajectoryRow
            by_src = dict(session.execute(sa.select(t.score_source, sa.func.count()).group_by(t.score_source)).all())
            sources = {k: int(by_src.get(k, 0)) for k in SOURCES} | {"none": int(by_src.get(None, 0))}
            n_quality = int(session.execute(sa.select(sa.func.count(t.quality))).scalar_one())
            n_clusters = int(session.execute(sa.select(sa.func.count(sa.distinct(t.cluster)))).scalar_one())
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
