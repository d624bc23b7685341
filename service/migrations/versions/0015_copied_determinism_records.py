"""determinism records: ``copied`` marks a job rerun's copy of another build's record, which
never enters the cost band, the previous comparable build or the trends; existing copies (a
record of a rerun build whose job was not run again, with the same measurement as the build it
reran) are marked

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 04:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A record that a rerun copied sits in a build with ``rerun_of`` and has a twin (same job kind,
# family, key and cost) in the build it reran, and its job the same start as its twin's (a
# copied job keeps it; a job that ran again in the rerun started later).
MARK_COPIES = """
UPDATE determinism_records SET copied = true
WHERE EXISTS (
    SELECT 1 FROM builds b
    JOIN jobs j ON j.id = determinism_records.job_id
    JOIN determinism_records o ON o.build_id = b.rerun_of AND o.key = determinism_records.key
    JOIN jobs oj ON oj.id = o.job_id
    WHERE b.id = determinism_records.build_id AND b.rerun_of IS NOT NULL
      AND oj.kind = j.kind AND (oj.family = j.family OR (oj.family IS NULL AND j.family IS NULL))
      AND (o.cost_ratio = determinism_records.cost_ratio
           OR (o.cost_ratio IS NULL AND determinism_records.cost_ratio IS NULL))
      AND j.started_at = oj.started_at)
"""


def upgrade() -> None:
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("copied", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute(sa.text(MARK_COPIES))


def downgrade() -> None:
    with op.batch_alter_table("determinism_records", schema=None) as batch_op:
        batch_op.drop_column("copied")
