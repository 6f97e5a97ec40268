"""Observability: the events table (retrain runs, exports) and per-trajectory PII counts.

`events` holds records other components hand the collector for its dashboard: the trainer's retrain
runs (trigger, decision, gate figures) and export manifests. `trajectories.pii` holds, per row, how many
values of each kind the anonymizer replaced at ingest (`{"EMAIL": 2}` as JSON; NULL when none, and for
rows stored before this revision).

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as b:
        b.add_column(sa.Column("pii", sa.Text(), nullable=True))
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(128), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.UniqueConstraint("kind", "key", name="uq_events_kind_key"),
    )
    op.create_index("ix_events_kind_at", "events", ["kind", "at"])


def downgrade() -> None:
    op.drop_index("ix_events_kind_at", table_name="events")
    op.drop_table("events")
    with op.batch_alter_table("trajectories") as b:
        b.drop_column("pii")
