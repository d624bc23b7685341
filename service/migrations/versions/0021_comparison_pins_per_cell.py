"""comparison pins per cell of the matrix: ``comparison_pins.cell`` (``core.cells.Cell.name``)
keys a pin with its subject, its series and "one in force" (``uq_comparison_pins_in_force``), so
a family's cell on another cuDNN backend gets a pin and series of its own. Every existing pin is
its family's host cell, whose name is the family's: each keeps its series, its config and the
determinism records that point to it.

A downgrade cannot keep a backend cell's pins apart from its family's (the older schema has one
series per subject and family): they are deleted, and their records kept without a series, as
records measured before any pin existed are.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05 07:55:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite keeps the unnamed unique constraint of 0011 unnamed; reflected under this convention in
# a batch, it is named so that it can be dropped (PostgreSQL named it itself when it was made)
_SQLITE_NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s_%(column_1_name)s"}
_OLD_UNIQUE = {
    "sqlite": "uq_comparison_pins_subject_family",
    "postgresql": "comparison_pins_subject_family_series_key",
}
_IN_FORCE = "uq_comparison_pins_in_force"
_WHERE = {
    "sqlite_where": sa.text("retired_at IS NULL"),
    "postgresql_where": sa.text("retired_at IS NULL"),
}

# a backend cell's pins, which the older schema cannot hold apart from its family's
_OF_BACKEND_CELLS = "SELECT id FROM comparison_pins WHERE cell <> family"


def _old_unique(dialect: str) -> str:
    return _OLD_UNIQUE.get(dialect, _OLD_UNIQUE["postgresql"])


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("comparison_pins", sa.Column("cell", sa.String(length=48), nullable=True))
    op.execute(sa.text("UPDATE comparison_pins SET cell = family"))
    with op.batch_alter_table("comparison_pins", naming_convention=_SQLITE_NAMES) as batch_op:
        batch_op.alter_column("cell", existing_type=sa.String(length=48), nullable=False)
        batch_op.drop_index(_IN_FORCE)
        batch_op.drop_constraint(_old_unique(dialect), type_="unique")
        batch_op.create_unique_constraint(
            "uq_comparison_pins_cell_series", ["subject", "cell", "series"]
        )
        batch_op.create_index("ix_comparison_pins_cell", ["cell"], unique=False)
        batch_op.create_index(_IN_FORCE, ["subject", "cell"], unique=True, **_WHERE)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # not left to ON DELETE SET NULL: on SQLite the revisions run with foreign keys off
    unpin = f"UPDATE determinism_records SET pin_id = NULL WHERE pin_id IN ({_OF_BACKEND_CELLS})"
    op.execute(sa.text(unpin))
    op.execute(sa.text(f"DELETE FROM comparison_pins WHERE id IN ({_OF_BACKEND_CELLS})"))
    with op.batch_alter_table("comparison_pins") as batch_op:
        batch_op.drop_index(_IN_FORCE)
        batch_op.drop_index("ix_comparison_pins_cell")
        batch_op.drop_constraint("uq_comparison_pins_cell_series", type_="unique")
        batch_op.create_unique_constraint(_old_unique(dialect), ["subject", "family", "series"])
        batch_op.create_index(_IN_FORCE, ["subject", "family"], unique=True, **_WHERE)
        batch_op.drop_column("cell")
