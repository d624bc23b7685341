"""stage_logs: each stage's runner log; builds.rerun_of: the build a rerun repeats;
notifications: the outbox of outgoing notifications (a watched branch turned red or green).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stage_logs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "stage"),
    )
    with op.batch_alter_table("stage_logs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_stage_logs_build_id"), ["build_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_stage_logs_job_id"), ["job_id"], unique=False)
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rerun_of", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_builds_rerun_of_builds", "builds", ["rerun_of"], ["id"], ondelete="SET NULL"
        )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("sent_at", service.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_notifications_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("notifications", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notifications_state"))
    op.drop_table("notifications")
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_constraint("fk_builds_rerun_of_builds", type_="foreignkey")
        batch_op.drop_column("rerun_of")
    with op.batch_alter_table("stage_logs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_stage_logs_job_id"))
        batch_op.drop_index(batch_op.f("ix_stage_logs_build_id"))
    op.drop_table("stage_logs")
