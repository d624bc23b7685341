"""Deterministic bits and the cost of determinism, compared with the previous comparable build.

When a job posts its determinism stage, each subject whose deterministic arm was exact becomes a
``DeterminismRecord`` keyed by ``core.history.comparable_key``; the newest record of the same
key from another build is "the previous comparable build". The comparison itself is
``core.history.compare``; its findings are stored with the job's other findings.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core import history
from core.wire import HistoryRow, Stage, StageResult
from service.models import DeterminismRecord, FindingRow, Job

log = logging.getLogger("fe_ci.history")

_KEPT = ("digests", "sample", "cost", "config_name", "comparable")


def previous_record(session: Session, key: str, build_id: int) -> DeterminismRecord | None:
    """The newest record of ``key`` from an earlier build."""
    return session.scalars(
        select(DeterminismRecord)
        .where(DeterminismRecord.key == key, DeterminismRecord.build_id < build_id)
        .order_by(DeterminismRecord.build_id.desc(), DeterminismRecord.id.desc())
        .limit(1)
    ).first()


def record_determinism(
    session: Session, job: Job, result: StageResult, cost_factor: float
) -> list[DeterminismRecord]:
    """Store and compare each exact deterministic arm of a posted determinism stage."""
    if result.name != Stage.determinism or session.scalar(
        select(DeterminismRecord.id).where(DeterminismRecord.job_id == job.id).limit(1)
    ):
        return []  # not this stage, or a retried post whose records are already stored
    stored = []
    for check in result.checks:
        subject, _, what = check.name.partition(".")
        metrics: dict[str, Any] = check.metrics
        if what != "deterministic" or not history.comparable(metrics):
            continue
        key = history.comparable_key(metrics["comparable"])
        prev = previous_record(session, key, job.build_id)
        found = history.compare(
            subject,
            metrics,
            prev.measured if prev else None,
            prev.build_id if prev else None,
            cost_factor,
        )
        record = DeterminismRecord(
            build_id=job.build_id,
            job_id=job.id,
            family=job.family,
            subject=subject,
            key=key,
            config=metrics.get("config_name"),
            measured={k: metrics.get(k) for k in _KEPT},
            bits=found.bits,
            changed=found.changed,
            previous_build_id=prev.build_id if prev else None,
            cost_ratio=found.cost_ratio,
            previous_cost_ratio=found.previous_cost_ratio,
            cost_regressed=found.cost_regressed,
            timer=(metrics.get("cost") or {}).get("timer"),
        )
        session.add(record)
        for finding in found.findings:
            row = finding.model_dump(exclude={"job_ids"})
            session.add(FindingRow(build_id=job.build_id, job_id=job.id, **row))
        log.info(
            "event=determinism_history build=%s subject=%s bits=%s previous=%s cost_ratio=%s",
            job.build_id,
            subject,
            found.bits,
            record.previous_build_id,
            found.cost_ratio,
        )
        stored.append(record)
    return stored


def history_rows(session: Session, build_id: int) -> list[HistoryRow]:
    rows = session.scalars(
        select(DeterminismRecord)
        .where(DeterminismRecord.build_id == build_id)
        .order_by(DeterminismRecord.id)
    )
    return [
        HistoryRow(
            job_id=r.job_id,
            family=r.family,
            subject=r.subject,
            config=r.config,
            bits=r.bits,
            changed=r.changed,
            previous_build_id=r.previous_build_id,
            cost_ratio=r.cost_ratio,
            previous_cost_ratio=r.previous_cost_ratio,
            cost_regressed=r.cost_regressed,
            timer=r.timer,
        )
        for r in rows
    ]
