"""stages: surface, the determinism surface a probe discovered (a list of knobs)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 04:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("surface", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.drop_column("surface")
