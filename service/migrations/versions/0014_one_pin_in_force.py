"""comparison pins: one series in force per subject and family, held by a unique partial index;
duplicates that concurrent re-pins left in force are retired first (the newest series stays)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05 04:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Every in-force pin below the newest series of its (subject, family) is retired at the time
# the newest was created (when it should have retired them). The newest is never updated, so the
# result does not depend on the order the rows are visited in.
RETIRE_DUPLICATES = """
UPDATE comparison_pins SET retired_at = (
    SELECT n.created_at FROM comparison_pins n
    WHERE n.subject = comparison_pins.subject AND n.family = comparison_pins.family
      AND n.retired_at IS NULL
    ORDER BY n.series DESC LIMIT 1)
WHERE retired_at IS NULL AND EXISTS (
    SELECT 1 FROM comparison_pins n
    WHERE n.subject = comparison_pins.subject AND n.family = comparison_pins.family
      AND n.retired_at IS NULL AND n.series > comparison_pins.series)
"""


def upgrade() -> None:
    op.execute(sa.text(RETIRE_DUPLICATES))
    with op.batch_alter_table("comparison_pins", schema=None) as batch_op:
        batch_op.create_index(
            "uq_comparison_pins_in_force",
            ["subject", "family"],
            unique=True,
            sqlite_where=sa.text("retired_at IS NULL"),
            postgresql_where=sa.text("retired_at IS NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("comparison_pins", schema=None) as batch_op:
        batch_op.drop_index("uq_comparison_pins_in_force")
