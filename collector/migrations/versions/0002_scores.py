"""Scores and curation: feedback rating, learned quality, score source, cluster; score_models;
composite indexes for the export's keyset order.

Adds the columns `collector score` and `collector export` read and write, the table that holds
the fitted quality model and clusterer (as JSON, never pickle), and recomposes every stored
score with the rule in `collector/_score.py` (written out here: a migration must not change when
the code does).

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (no table rebuild on SQLite): cheap on a big table.
    with op.batch_alter_table("trajectories") as b:
        b.add_column(sa.Column("feedback_rating", sa.Float(), nullable=True))
        b.add_column(sa.Column("quality", sa.Float(), nullable=True))
        b.add_column(sa.Column("score_source", sa.String(16), nullable=True))
        b.add_column(sa.Column("cluster", sa.Integer(), nullable=True))
    op.create_index("ix_trajectories_cluster", "trajectories", ["cluster"])
    op.create_index("ix_trajectories_score", "trajectories", ["score"])
    # Keyset pages of the export become index range scans; the composite indexes cover what the
    # single-column ones did, so ingest maintains no more indexes than before.
    op.create_index("ix_trajectories_created_at_id", "trajectories", ["created_at", "id"])
    op.create_index("ix_trajectories_task_created_id", "trajectories", ["task_id", "created_at", "id"])
    op.drop_index("ix_trajectories_created_at", table_name="trajectories")
    op.drop_index("ix_trajectories_task_id", table_name="trajectories")

    op.create_table(
        "score_models",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("auc", sa.Float(), nullable=True),
        sa.Column("n_train", sa.Integer(), nullable=False),
        sa.Column("n_test", sa.Integer(), nullable=False),
        sa.Column("params", sa.Text(), nullable=False),
    )
    op.create_index("ix_score_models_kind", "score_models", ["kind"])

    t = sa.table(
        "trajectories",
        sa.column("id", sa.String),
        sa.column("reward", sa.Float),
        sa.column("score", sa.Float),
        sa.column("feedback_rating", sa.Float),
        sa.column("score_source", sa.String),
    )
    f = sa.table("feedback", sa.column("trajectory_id", sa.String), sa.column("rating", sa.Float))
    mean_rating = sa.select(sa.func.avg(f.c.rating)).where(f.c.trajectory_id == t.c.id).scalar_subquery()
    op.execute(t.update().values(feedback_rating=mean_rating))
    r01 = (t.c.feedback_rating + 1.0) / 2.0
    both = sa.and_(t.c.reward.is_not(None), t.c.feedback_rating.is_not(None))
    op.execute(
        t.update().values(
            score=sa.case((both, (t.c.reward + r01) / 2.0), (t.c.reward.is_not(None), t.c.reward),
                          (t.c.feedback_rating.is_not(None), r01), else_=sa.null()),
            score_source=sa.case((both, "reward+feedback"), (t.c.reward.is_not(None), "reward"),
                                 (t.c.feedback_rating.is_not(None), "feedback"), else_=sa.null()),
        )
    )


def downgrade() -> None:
    op.drop_index("ix_score_models_kind", table_name="score_models")
    op.drop_table("score_models")
    op.create_index("ix_trajectories_task_id", "trajectories", ["task_id"])
    op.create_index("ix_trajectories_created_at", "trajectories", ["created_at"])
    op.drop_index("ix_trajectories_task_created_id", table_name="trajectories")
    op.drop_index("ix_trajectories_created_at_id", table_name="trajectories")
    op.drop_index("ix_trajectories_score", table_name="trajectories")
    op.drop_index("ix_trajectories_cluster", table_name="trajectories")
    with op.batch_alter_table("trajectories") as b:
        for name in ("cluster", "score_source", "quality", "feedback_rating"):
            b.drop_column(name)
