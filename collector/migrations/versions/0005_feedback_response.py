"""Feedback remembers the completion it names: `feedback.response_id`.

Feedback sent by response id (`POST /v1/feedback {"response_id": ...}`) names one completion of a captured
conversation, and its correction replaces that completion's message at export (`_export_correction.py`).
The column is nullable: feedback sent by trajectory id, and every row stored before this revision, has
none, and its correction replaces the trajectory's last assistant message.

Live databases: adding a nullable column without a default rewrites nothing. SQLite's batch mode sees that
`ALTER TABLE ... ADD COLUMN` suffices and does not copy the table; Postgres only changes its catalog.

Revision ID: 0005
Revises: 0004
Create Date: 2025-01-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("feedback") as b:
        b.add_column(sa.Column("response_id", sa.String(256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("feedback") as b:
        b.drop_column("response_id")
