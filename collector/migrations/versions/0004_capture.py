"""Gateway capture: response ids -> trajectories, and which API key sent a feedback.

`response_ids` maps the id of every chat completion the gateway captured (the `id` the client received)
to the trajectory that holds it, filled at ingest from `metadata.response_ids`, so `POST /v1/feedback
{"response_id": ...}` finds its trajectory with one primary-key read instead of scanning the stored JSON.
`feedback.key_id` records the (non-secret) id of the gateway API key that sent a feedback, so one key's
feedback can be found and purged.

Revision ID: 0004
Revises: 0003
Create Date: 2025-01-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("feedback") as b:
        b.add_column(sa.Column("key_id", sa.String(64), nullable=True))
    columns = [sa.Column("response_id", sa.String(256), primary_key=True, nullable=False),
               sa.Column("trajectory_id", sa.String(128), nullable=False)]
    op.create_table("response_ids", *columns)
    op.create_index("ix_response_ids_trajectory_id", "response_ids", ["trajectory_id"])


def downgrade() -> None:
    with op.batch_alter_table("feedback") as b:
        b.drop_column("key_id")
    op.drop_index("ix_response_ids_trajectory_id", table_name="response_ids")
    op.drop_table("response_ids")
