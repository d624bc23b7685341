"""chosen configs keyed per GPU model and cuDNN backend

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 12:20:00.000000

The table was created by 0001 but nothing wrote it, so it is recreated rather than altered: a
config is remembered per (subject, family, GPU model, cuDNN backend), with the build that chose it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table("chosen_configs")
    op.create_table(
        "chosen_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=False),
        sa.Column("gpu", sa.String(length=200), nullable=False),
        sa.Column("cudnn_backend", sa.String(length=64), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("subject", "family", "gpu", "cudnn_backend"),
    )
    with op.batch_alter_table("chosen_configs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chosen_configs_family"), ["family"], unique=False)


def downgrade() -> None:
    op.drop_table("chosen_configs")
    op.create_table(
        "chosen_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("subject", "family"),
    )
