"""determinism records: deterministic bits and the cost of determinism across builds

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 12:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "determinism_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("family", sa.String(length=16), nullable=True),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=True),
        sa.Column("measured", sa.JSON(), nullable=False),
        sa.Column("bits", sa.String(length=16), nullable=False),
        sa.Column("changed", sa.JSON(), nullable=False),
        sa.Column("previous_build_id", sa.Integer(), nullable=True),
        sa.Column("cost_ratio", sa.Float(), nullable=True),
        sa.Column("previous_cost_ratio", sa.Float(), nullable=True),
        sa.Column("cost_regressed", sa.Boolean(), nullable=False),
        sa.Column("timer", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["previous_build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_determinism_records_build_id"), ["build_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_determinism_records_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_determinism_records_key"), ["key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_determinism_records_key"))
        batch_op.drop_index(batch_op.f("ix_determinism_records_job_id"))
        batch_op.drop_index(batch_op.f("ix_determinism_records_build_id"))
    op.drop_table("determinism_records")
