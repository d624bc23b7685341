"""webhook deliveries, commit artifacts

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 18:54:00.901693
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=500), nullable=False),
        sa.Column("commit", sa.String(length=40), nullable=False),
        sa.Column("python_tag", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("filename", sa.String(length=300), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=True),
        sa.Column("log_sha256", sa.String(length=64), nullable=True),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("repo", "commit", "python_tag"),
    )
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_artifacts_commit"), ["commit"], unique=False)

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("outcome", sa.String(length=200), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery"),
    )
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("message", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_column("message")

    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("artifacts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_artifacts_commit"))

    op.drop_table("artifacts")
