"""jobs: ``outcome``, how an ended job ended (ran, error, skipped, cancelled), a column read
everywhere instead of the prefix of its human reason; existing rows filled from their state and
that prefix, the last time it is read

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05 05:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILL = """
UPDATE jobs SET outcome = CASE
    WHEN state = 'cancelled' THEN 'cancelled'
    WHEN reason LIKE 'error%' THEN 'error'
    WHEN reason LIKE 'skip%' THEN 'skipped'
    ELSE 'ran'
END
WHERE state IN ('finished', 'cancelled')
"""


def upgrade() -> None:
    op.add_column("jobs", sa.Column("outcome", sa.String(length=16), nullable=True))
    op.execute(sa.text(FILL))


def downgrade() -> None:
    # not in a batch: on SQLite a batch copies ``jobs`` and drops the original, and dropping it
    # deletes every row that cascades from a job (stages, checks, determinism records, ...)
    op.drop_column("jobs", "outcome")
