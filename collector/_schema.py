"""The collector's tables (SQLModel) and the one timestamp convention they share.

Four tables: `trajectories` (one anonymized trajectory per row, its JSON in `data` plus the columns
that queries filter, group and order on), `feedback` (late user feedback, joined by trajectory id, with
the captured completion it names when it was sent by response id),
`response_ids` (a captured completion's id -> its trajectory, `_capture_rows`) and `score_models`
(fitted quality models and clusterers as JSON). Every timestamp column holds
naive UTC (`utcnow`, `to_naive_utc`): SQLite keeps no zone, and one convention on both dialects
keeps keyset comparisons exact.

Deliberately not here: creating or changing the schema. Only the Alembic migrations in
`collector/migrations` do that (`_migrate.py`); these classes describe what they produce, and a
test checks that the two agree.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel


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
    ingest_seq: int | None = Field(default=None, sa_type=sa.BigInteger(), index=True,
                                   description="ingest order, given when the row is stored or replaced (migration 0006)")


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
    response_id: str | None = Field(default=None, sa_type=sa.String(256),
                                    description="the captured completion it names (None: sent by trajectory id)")


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
