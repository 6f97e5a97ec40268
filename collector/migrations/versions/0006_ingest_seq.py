"""Ingest order: `trajectories.ingest_seq`, a number that only grows, given to a row when it is stored or
replaced (a captured session that grew).

The new-data trigger counts the trajectories stored after a run's export. Counting by `created_at` (the
collector's wall clock) against `exported_at` (the trainer's) stalls for as long as either clock stepped: a
clock set back an hour stamps the next hour's rows before the last export. The run records the store's
highest `ingest_seq` when it exports instead, and the trigger counts the rows above it; no clock is read.

Postgres hands the numbers out from a sequence (`trajectories_ingest_seq`, never reused, no lock); SQLite
has one writer at a time, and ingest takes the write lock before it reads `max(ingest_seq)`.

Live databases: the column is added nullable and the rows already stored are numbered in (created_at, id)
order, so the first trigger after the upgrade counts from the right place once a run has recorded its mark.

Revision ID: 0006
Revises: 0005
Create Date: 2025-01-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

SEQUENCE = "trajectories_ingest_seq"


def upgrade() -> None:
    with op.batch_alter_table("trajectories") as b:
        b.add_column(sa.Column("ingest_seq", sa.BigInteger(), nullable=True))
    op.create_index("ix_trajectories_ingest_seq", "trajectories", ["ingest_seq"])
    op.execute("UPDATE trajectories SET ingest_seq = (SELECT n FROM (SELECT id, ROW_NUMBER() OVER "
               "(ORDER BY created_at, id) AS n FROM trajectories) numbered WHERE numbered.id = trajectories.id)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SEQUENCE {SEQUENCE} AS BIGINT")
        op.execute(f"SELECT setval('{SEQUENCE}', COALESCE((SELECT MAX(ingest_seq) FROM trajectories), 0) + 1, false)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP SEQUENCE {SEQUENCE}")
    op.drop_index("ix_trajectories_ingest_seq", table_name="trajectories")
    with op.batch_alter_table("trajectories") as b:
        b.drop_column("ingest_seq")
