"""drift: one index on (subject, arm, build_id) in place of the one on subject; jobs: an index on
(state, runner_id). The trends page reads a subject's control arm for the newest builds, and the
runners page each runner's leased jobs, without reading every build's rows.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 15:10:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("drift", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_drift_subject"))
        batch_op.create_index(
            "ix_drift_subject_arm_build_id", ["subject", "arm", "build_id"], unique=False
        )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_state_runner_id", ["state", "runner_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_state_runner_id")
    with op.batch_alter_table("drift", schema=None) as batch_op:
        batch_op.drop_index("ix_drift_subject_arm_build_id")
        batch_op.create_index(batch_op.f("ix_drift_subject"), ["subject"], unique=False)
