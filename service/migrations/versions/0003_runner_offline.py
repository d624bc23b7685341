"""runners: offline_at, set when a runner says it stopped cleanly

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 12:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("offline_at", service.models.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runners", schema=None) as batch_op:
        batch_op.drop_column("offline_at")
