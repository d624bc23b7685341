"""stages: timings, where a stage's seconds went

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 13:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("timings", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.drop_column("timings")
