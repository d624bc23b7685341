"""stages: ``result``, the stage's result stored whole (the ``StageResult`` the runner posted);
``version``, ``log_tail`` and ``timings`` and the ``refusal_rows`` table, which only the report
read, are read from it and dropped. Existing rows get a result made of their own fields and
checks, a refusal stage's with its job's refusal rows.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 07:10:00.000000
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# the tables as this revision reads and writes them (never the models, which move on)
_STAGES = sa.table(
    "stages",
    sa.column("id", sa.Integer),
    sa.column("job_id", sa.Integer),
    sa.column("name", sa.String),
    sa.column("status", sa.String),
    sa.column("reason", sa.Text),
    sa.column("duration_s", sa.Float),
    sa.column("version", sa.String),
    sa.column("log_tail", sa.Text),
    sa.column("timings", sa.JSON),
    sa.column("surface", sa.JSON),
    sa.column("result", sa.JSON),
)
_CHECKS = sa.table(
    "checks",
    sa.column("id", sa.Integer),
    sa.column("stage_id", sa.Integer),
    sa.column("name", sa.String),
    sa.column("status", sa.String),
    sa.column("detail", sa.Text),
    sa.column("metrics", sa.JSON),
)
_REFUSAL = sa.table(
    "refusal_rows",
    sa.column("id", sa.Integer),
    sa.column("build_id", sa.Integer),
    sa.column("job_id", sa.Integer),
    sa.column("activation", sa.String),
    sa.column("request", sa.String),
    sa.column("scale_bias", sa.Boolean),
    sa.column("fc1_bias", sa.Boolean),
    sa.column("unit_scale", sa.Boolean),
    sa.column("expected", sa.String),
    sa.column("observed", sa.String),
    sa.column("status", sa.String),
    sa.column("detail", sa.Text),
    sa.column("call_kwargs", sa.JSON),
)
_JOBS = sa.table("jobs", sa.column("id", sa.Integer), sa.column("build_id", sa.Integer))
_REFUSAL_FIELDS = (
    "activation",
    "request",
    "scale_bias",
    "fc1_bias",
    "unit_scale",
    "expected",
    "observed",
    "status",
    "detail",
    "call_kwargs",
)
_BATCH = 500  # stage rows read and written at a time


def _checks(conn: sa.Connection, stage_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in stage_ids}
    rows = conn.execute(
        sa.select(_CHECKS).where(_CHECKS.c.stage_id.in_(stage_ids)).order_by(_CHECKS.c.id)
    )
    for c in rows:
        out[c.stage_id].append(
            {"name": c.name, "status": c.status, "detail": c.detail, "metrics": c.metrics or {}}
        )
    return out


def _refusal(conn: sa.Connection, job_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {i: [] for i in job_ids}
    rows = conn.execute(
        sa.select(_REFUSAL).where(_REFUSAL.c.job_id.in_(job_ids)).order_by(_REFUSAL.c.id)
    )
    for r in rows:
        row = {k: getattr(r, k) for k in _REFUSAL_FIELDS}
        out[r.job_id].append({**row, "call_kwargs": row["call_kwargs"] or {}})
    return out


def _batches(conn: sa.Connection, columns: list[Any]) -> Any:
    last = 0
    while True:
        rows = conn.execute(
            sa.select(*columns).where(_STAGES.c.id > last).order_by(_STAGES.c.id).limit(_BATCH)
        ).all()
        if not rows:
            return
        yield rows
        last = rows[-1].id


def upgrade() -> None:
    op.add_column("stages", sa.Column("result", sa.JSON(), nullable=True))
    conn = op.get_bind()
    c = _STAGES.c
    columns = [c.id, c.name, c.status, c.reason, c.duration_s, c.version, c.log_tail, c.timings]
    for rows in _batches(conn, [*columns, c.surface, c.job_id]):
        checks = _checks(conn, [r.id for r in rows])
        refusal = _refusal(conn, [r.job_id for r in rows if r.name == "refusal"])
        for r in rows:
            result = {
                "name": r.name,
                "status": r.status,
                "reason": r.reason,
                "duration_s": r.duration_s,
                "checks": checks[r.id],
                "surface": r.surface or [],
                "version": r.version,
                "log_tail": r.log_tail,
                "timings": r.timings or {},
            }
            if r.name == "refusal":
                result["refusal"] = refusal[r.job_id]
            conn.execute(sa.update(_STAGES).where(c.id == r.id).values(result=result))
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.alter_column("result", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_column("version")
        batch_op.drop_column("log_tail")
        batch_op.drop_column("timings")
    with op.batch_alter_table("refusal_rows", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_refusal_rows_job_id"))
        batch_op.drop_index(batch_op.f("ix_refusal_rows_build_id"))
    op.drop_table("refusal_rows")


def downgrade() -> None:
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
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("version", sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column("log_tail", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("timings", sa.JSON(), nullable=False, server_default=sa.text("'{}'"))
        )
    conn = op.get_bind()
    c = _STAGES.c
    for rows in _batches(conn, [c.id, c.result, c.job_id]):
        builds = dict(
            conn.execute(
                sa.select(_JOBS.c.id, _JOBS.c.build_id).where(
                    _JOBS.c.id.in_({r.job_id for r in rows})
                )
            ).all()
        )
        for r in rows:
            result = r.result or {}
            refusal = [
                {**{k: row.get(k) for k in _REFUSAL_FIELDS}, "detail": row.get("detail") or ""}
                | {"call_kwargs": row.get("call_kwargs") or {}}
                for row in result.get("refusal") or ()
            ]
            if refusal:
                ids = {"build_id": builds[r.job_id], "job_id": r.job_id}
                conn.execute(sa.insert(_REFUSAL), [{**ids, **row} for row in refusal])
            conn.execute(
                sa.update(_STAGES)
                .where(c.id == r.id)
                .values(
                    version=result.get("version"),
                    log_tail=(result.get("log_tail") or "")[-4000:],
                    timings=result.get("timings") or {},
                )
            )
    with op.batch_alter_table("stages", schema=None) as batch_op:
        batch_op.alter_column("log_tail", existing_type=sa.Text(), nullable=False)
        batch_op.drop_column("result")
