"""watched_releases: each release the watcher took from the package index, once per (package,
version), with the build it became

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05 07:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watched_releases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("package", sa.String(length=100), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("filename", sa.String(length=300), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("package", "version"),
    )


def downgrade() -> None:
    op.drop_table("watched_releases")
