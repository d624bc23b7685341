"""bisections: the search for a red transition's first bad commit, its steps, builds marked;
a job may run only some subjects

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 12:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "bisections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("repo", sa.String(length=500), nullable=False),
        sa.Column("branch", sa.String(length=300), nullable=False),
        sa.Column("good_build_id", sa.Integer(), nullable=True),
        sa.Column("bad_build_id", sa.Integer(), nullable=True),
        sa.Column("good_commit", sa.String(length=40), nullable=False),
        sa.Column("bad_commit", sa.String(length=40), nullable=False),
        sa.Column("question", sa.JSON(), nullable=False),
        sa.Column("commits", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("max_builds", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("first_bad", sa.JSON(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("finished_at", service.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["bad_build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["good_build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("bad_build_id"),
    )
    with op.batch_alter_table("bisections", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_bisections_state"), ["state"], unique=False)

    op.create_table(
        "bisection_steps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bisection_id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("commit", sa.String(length=40), nullable=False),
        sa.Column("mark", sa.String(length=8), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["bisection_id"], ["bisections.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("bisection_steps", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_bisection_steps_bisection_id"), ["bisection_id"], unique=False
        )

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("subjects", sa.JSON(), nullable=True))
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("bisection_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_builds_bisection_id"), ["bisection_id"], unique=False)
        batch_op.create_foreign_key(
            "fk_builds_bisection_id", "bisections", ["bisection_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_constraint("fk_builds_bisection_id", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_builds_bisection_id"))
        batch_op.drop_column("bisection_id")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("subjects")
    with op.batch_alter_table("bisection_steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bisection_steps_bisection_id"))
    op.drop_table("bisection_steps")
    with op.batch_alter_table("bisections", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_bisections_state"))
    op.drop_table("bisections")
