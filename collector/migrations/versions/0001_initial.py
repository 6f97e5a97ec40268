"""Initial schema: trajectories and feedback.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "trajectories",
        sa.Column("id", sa.String(128), primary_key=True, nullable=False),
        sa.Column("app", sa.String(128), nullable=False),
        sa.Column("task_id", sa.String(256), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("served_version", sa.String(256), nullable=True),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("n_messages", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_trajectories_app", "trajectories", ["app"])
    op.create_index("ix_trajectories_task_id", "trajectories", ["task_id"])
    op.create_index("ix_trajectories_served_version", "trajectories", ["served_version"])
    op.create_index("ix_trajectories_content_hash", "trajectories", ["content_hash"])
    op.create_index("ix_trajectories_created_at", "trajectories", ["created_at"])

    op.create_table(
        "feedback",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("trajectory_id", sa.String(128), nullable=False),
        sa.Column("rating", sa.Float(), nullable=True),
        sa.Column("correction", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_feedback_trajectory_id", "feedback", ["trajectory_id"])


def downgrade() -> None:
    op.drop_index("ix_feedback_trajectory_id", table_name="feedback")
    op.drop_table("feedback")
    for name in ("created_at", "content_hash", "served_version", "task_id", "app"):
        op.drop_index(f"ix_trajectories_{name}", table_name="trajectories")
    op.drop_table("trajectories")
