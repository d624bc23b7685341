"""jobs matched by labels: ``jobs.requires`` (what a runner's labels must satisfy, canonical text
``arch=sm_90,cudnn=9.28.1``) and ``jobs.cell`` (a GPU job's cell of the matrix, family x cuDNN
backend); existing jobs filled from their kind and family (a GPU job of a family is that family's
host-backend cell, whose name is the family's), and each runner's labels from its family and
builder columns where it sent none

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05 07:15:00.000000
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FILL_JOBS = """
UPDATE jobs SET
    requires = CASE
        WHEN kind = 'gpu' AND family IS NOT NULL THEN 'arch=' || family
        WHEN kind = 'build' THEN 'builder'
        ELSE ''
    END,
    cell = CASE WHEN kind = 'gpu' THEN family ELSE NULL END
"""


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("requires", sa.String(length=200), nullable=False, server_default="")
    )
    op.add_column("jobs", sa.Column("cell", sa.String(length=48), nullable=True))
    op.execute(sa.text(FILL_JOBS))
    op.create_index("ix_jobs_state_requires", "jobs", ["state", "requires"])
    conn = op.get_bind()
    value = "CAST(:labels AS JSON)" if conn.dialect.name == "postgresql" else ":labels"
    rows = conn.execute(sa.text("SELECT id, labels, family, builder FROM runners")).all()
    for runner_id, raw, family, builder in rows:
        labels = (json.loads(raw) if isinstance(raw, str) else raw) or {}
        if family and "arch" not in labels:
            labels["arch"] = family
        if builder and "builder" not in labels:
            labels["builder"] = "1"
        conn.execute(
            sa.text(f"UPDATE runners SET labels = {value} WHERE id = :id"),
            {"labels": json.dumps(labels), "id": runner_id},
        )


def downgrade() -> None:
    # not in a batch: on SQLite a batch copies ``jobs`` and drops the original, and dropping it
    # deletes every row that cascades from a job (stages, checks, determinism records, ...)
    op.drop_index("ix_jobs_state_requires", table_name="jobs")
    op.drop_column("jobs", "cell")
    op.drop_column("jobs", "requires")
