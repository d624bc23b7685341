"""status_outbox: each state a GitHub context should show, written with the change that causes
it, in order per (commit, context)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05 07:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "status_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("sha", sa.String(length=40), nullable=False),
        sa.Column("context", sa.String(length=200), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("sent_at", service.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("sha", "context", "seq"),
    )
    op.create_index("ix_status_outbox_due", "status_outbox", ["state", "next_attempt_at"])
    op.create_index("ix_status_outbox_build_id", "status_outbox", ["build_id"])


def downgrade() -> None:
    op.drop_index("ix_status_outbox_build_id", table_name="status_outbox")
    op.drop_index("ix_status_outbox_due", table_name="status_outbox")
    op.drop_table("status_outbox")
