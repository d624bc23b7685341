"""comparison pins: one comparison point per subject and family, in series; each determinism
record says which series it was measured at and the cost band it was judged by

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "comparison_pins",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=False),
        sa.Column("series", sa.Integer(), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=False),
        sa.Column("definition", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("retired_at", service.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("subject", "family", "series"),
    )
    with op.batch_alter_table("comparison_pins", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_comparison_pins_family"), ["family"], unique=False)
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pin_id", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("cost_band", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )
        batch_op.create_index(batch_op.f("ix_determinism_records_pin_id"), ["pin_id"], unique=False)
        batch_op.create_foreign_key(
            "fk_determinism_records_pin_id",
            "comparison_pins",
            ["pin_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.drop_constraint("fk_determinism_records_pin_id", type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_determinism_records_pin_id"))
        batch_op.drop_column("cost_band")
        batch_op.drop_column("pin_id")
    with op.batch_alter_table("comparison_pins", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_comparison_pins_family"))
    op.drop_table("comparison_pins")
