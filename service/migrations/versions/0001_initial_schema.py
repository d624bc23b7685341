"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 18:43:12.505989
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import service.models

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "builds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("filename", sa.String(length=300), nullable=True),
        sa.Column("size", sa.Integer(), nullable=True),
        sa.Column("repo", sa.String(length=500), nullable=True),
        sa.Column("commit", sa.String(length=40), nullable=True),
        sa.Column("branch", sa.String(length=300), nullable=True),
        sa.Column("submitted_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("finished_at", service.models.UTCDateTime(), nullable=True),
        sa.Column("cancelled_at", service.models.UTCDateTime(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("verdict_reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_builds_commit"), ["commit"], unique=False)
        batch_op.create_index(batch_op.f("ix_builds_sha256"), ["sha256"], unique=False)
        batch_op.create_index(batch_op.f("ix_builds_verdict"), ["verdict"], unique=False)

    op.create_table(
        "runners",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=True),
        sa.Column("builder", sa.Boolean(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("revoked_at", service.models.UTCDateTime(), nullable=True),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("last_seen_at", service.models.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "chosen_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("subject", "family"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("family", sa.String(length=16), nullable=True),
        sa.Column("stages", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("runner_id", sa.Integer(), nullable=True),
        sa.Column("lease_token_hash", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", service.models.UTCDateTime(), nullable=True),
        sa.Column("wait_deadline", service.models.UTCDateTime(), nullable=True),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.Column("started_at", service.models.UTCDateTime(), nullable=True),
        sa.Column("finished_at", service.models.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["runner_id"],
            ["runners.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_build_id"), ["build_id"], unique=False)
        batch_op.create_index("ix_jobs_state_kind", ["state", "kind"], unique=False)

    op.create_table(
        "capabilities",
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("importable", sa.Boolean(), nullable=False),
        sa.Column("knob", sa.String(length=64), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("default", sa.String(length=100), nullable=True),
        sa.Column("method", sa.String(length=16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("entry_point", sa.String(length=200), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("capabilities", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_capabilities_build_id"), ["build_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_capabilities_job_id"), ["job_id"], unique=False)

    op.create_table(
        "drift",
        sa.Column("family", sa.String(length=16), nullable=True),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("output", sa.String(length=32), nullable=False),
        sa.Column("arm", sa.String(length=16), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("differing", sa.Integer(), nullable=False),
        sa.Column("distinct", sa.Integer(), nullable=False),
        sa.Column("max_abs_diff", sa.Float(), nullable=True),
        sa.Column("finite", sa.Boolean(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("luck_probability", sa.Float(), nullable=True),
        sa.Column("stopped_by", sa.String(length=32), nullable=True),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("drift", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_drift_build_id"), ["build_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_drift_job_id"), ["job_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_drift_subject"), ["subject"], unique=False)

    op.create_table(
        "findings",
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_build_id"), ["build_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_findings_job_id"), ["job_id"], unique=False)

    op.create_table(
        "refusal_rows",
        sa.Column("activation", sa.String(length=16), nullable=False),
        sa.Column("request", sa.String(length=32), nullable=False),
        sa.Column("scale_bias", sa.Boolean(), nullable=False),
        sa.Column("fc1_bias", sa.Boolean(), nullable=False),
        sa.Column("unit_scale", sa.Boolean(), nullable=False),
        sa.Column("expected", sa.String(length=16), nullable=False),
        sa.Column("observed", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("call_kwargs", sa.JSON(), nullable=False),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["build_id"], ["builds.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("refusal_rows", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_refusal_rows_build_id"), ["build_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_refusal_rows_job_id"), ["job_id"], unique=False)

    op.create_table(
        "stages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=False),
        sa.Column("created_at", service.models.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "name"),
    )
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_stages_job_id"), ["job_id"], unique=False)

    op.create_table(
        "checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("stage_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["stage_id"], ["stages.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("checks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_checks_stage_id"), ["stage_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("checks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_checks_stage_id"))

    op.drop_table("checks")
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_stages_job_id"))

    op.drop_table("stages")
    with op.batch_alter_table("refusal_rows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_refusal_rows_job_id"))
        batch_op.drop_index(batch_op.f("ix_refusal_rows_build_id"))

    op.drop_table("refusal_rows")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_job_id"))
        batch_op.drop_index(batch_op.f("ix_findings_build_id"))

    op.drop_table("findings")
    with op.batch_alter_table("drift", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_drift_subject"))
        batch_op.drop_index(batch_op.f("ix_drift_job_id"))
        batch_op.drop_index(batch_op.f("ix_drift_build_id"))

    op.drop_table("drift")
    with op.batch_alter_table("capabilities", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_capabilities_job_id"))
        batch_op.drop_index(batch_op.f("ix_capabilities_build_id"))

    op.drop_table("capabilities")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_state_kind")
        batch_op.drop_index(batch_op.f("ix_jobs_build_id"))

    op.drop_table("jobs")
    op.drop_table("chosen_configs")
    op.drop_table("runners")
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_builds_verdict"))
        batch_op.drop_index(batch_op.f("ix_builds_sha256"))
        batch_op.drop_index(batch_op.f("ix_builds_commit"))

    op.drop_table("builds")
