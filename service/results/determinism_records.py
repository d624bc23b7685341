"""Deterministic bits and the cost of determinism, compared along a comparison point's series.

When a job posts its determinism stage, each subject whose comparison (measured at its pinned
config, ``service/results/pins.py``) is an exact deterministic arm becomes a ``DeterminismRecord``
keyed by ``core.history.comparable_key`` and tagged with the pin's series; the newest record of the
same key and series from another build is "the previous comparable build", and the genuine
records before it (none flagged) make the cost gate's band. The comparison itself is
``core.history.compare``; its findings are stored with the job's other findings. A measurement
off the job's pin is refused (``OffPin``, 422): the stage's rows are written first, and the
post's transaction is rolled back with the refusal, so nothing of the stage stays stored. A job
rerun's copies of the other jobs' records (``copied``) are never a previous build nor in a band:
a measurement counts once, in the build that made it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from core import history
from core.kinds import FindingKind
from core.wire import Check, Finding, HistoryRow, Severity, Stage, StageResult
from service.models import ComparisonPin, DeterminismRecord, FindingRow, Job
from service.results import pins

log = logging.getLogger("fe_ci.history")

_KEPT = ("digests", "sample", "cost", "config_name", "comparable")


def _same_series(pin: ComparisonPin | None) -> Any:
    """Measured in the series of ``pin``, by the build itself (a rerun's copy counts once, in
    the build it was copied from). A subject's first series also takes the records made before
    its point was chosen: they are of the same key, so the same config, inputs, cell, GPU and
    torch (a point is measured where the control varied in half its comparisons, which an
    earlier build at that very config may have missed)."""
    unpinned = DeterminismRecord.pin_id.is_(None)
    series: ColumnElement[bool]
    if pin is None:
        series = unpinned
    elif pin.series == 1:
        series = or_(DeterminismRecord.pin_id == pin.id, unpinned)
    else:
        series = DeterminismRecord.pin_id == pin.id
    return and_(series, DeterminismRecord.copied.is_(False))


def previous_record(
    session: Session, key: str, build_id: int, pin: ComparisonPin | None = None
) -> DeterminismRecord | None:
    """The newest record of ``key`` in the series of ``pin`` from an earlier build."""
    return session.scalars(
        select(DeterminismRecord)
        .where(DeterminismRecord.key == key, DeterminismRecord.build_id < build_id)
        .where(_same_series(pin))
        .order_by(DeterminismRecord.build_id.desc(), DeterminismRecord.id.desc())
        .limit(1)
    ).first()


def genuine_ratios(
    session: Session, key: str, build_id: int, pin: ComparisonPin | None
) -> list[float]:
    """The cost ratios of the newest genuine earlier builds of the key and series, oldest first:
    the records whose cost was not flagged, so a slow build does not widen the band."""
    ratios = session.scalars(
        select(DeterminismRecord.cost_ratio)
        .where(DeterminismRecord.key == key, DeterminismRecord.build_id < build_id)
        .where(_same_series(pin), DeterminismRecord.cost_ratio.is_not(None))
        .where(DeterminismRecord.cost_regressed.is_(False))
        .order_by(DeterminismRecord.build_id.desc(), DeterminismRecord.id.desc())
        .limit(history.COST_WINDOW)
    )
    return [float(r) for r in ratios if r is not None][::-1]


def record_determinism(
    session: Session, job: Job, result: StageResult, cost_factor: float
) -> list[DeterminismRecord]:
    """Store and compare each exact deterministic arm of a posted determinism stage.

    Every measurement is placed in its series first: one off the job's pin raises (a 422)
    before any record is added, and the caller's transaction stores nothing of the stage.
    """
    if result.name != Stage.determinism or session.scalar(
        select(DeterminismRecord.id).where(DeterminismRecord.job_id == job.id).limit(1)
    ):
        return []  # not this stage, or a retried post whose records are already stored
    placed: list[tuple[Check, Mapping[str, Any], ComparisonPin | None]] = []
    for check in result.checks:
        measured = history.measurement(check.metrics)
        if check.name.endswith(".deterministic") and history.comparable(measured):
            placed.append((check, measured, pins.series_for(session, job, check, measured)))
    return [_record(session, job, c, m, pin, cost_factor) for c, m, pin in placed]


def _record(
    session: Session,
    job: Job,
    check: Check,
    metrics: Mapping[str, Any],
    pin: ComparisonPin | None,
    cost_factor: float,
) -> DeterminismRecord:
    subject = check.subject
    key = history.comparable_key(metrics["comparable"])
    pin_id = pin.id if pin else None
    prev = previous_record(session, key, job.build_id, pin)
    found = history.compare(
        subject,
        metrics,
        prev.measured if prev else None,
        prev.build_id if prev else None,
        cost_factor,
        series=genuine_ratios(session, key, job.build_id, pin),
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
        pin_id=pin_id,
        cost_band=history.band_fields(found.band),
    )
    findings = list(found.findings)
    if pin is not None and pin.series > 1 and _first_of_series(session, pin.id):
        findings.append(_series_marker(session, pin, subject))
    session.add(record)
    for finding in findings:
        row = finding.model_dump(exclude={"job_ids"})
        session.add(FindingRow(build_id=job.build_id, job_id=job.id, **row))
    session.flush()
    log.info(
        "event=determinism_history build=%s subject=%s series=%s bits=%s previous=%s "
        "cost_ratio=%s regressed=%s",
        job.build_id,
        subject,
        pin.series if pin else None,
        found.bits,
        record.previous_build_id,
        found.cost_ratio,
        found.cost_regressed,
    )
    return record


def _first_of_series(session: Session, pin_id: int) -> bool:
    count = session.scalar(
        select(func.count(DeterminismRecord.id)).where(DeterminismRecord.pin_id == pin_id)
    )
    return not count


def _series_marker(session: Session, pin: ComparisonPin, subject: str) -> Finding:
    """The info finding that marks a new series in the report (the trends page draws it too)."""
    before = session.scalars(
        select(ComparisonPin)
        .where(ComparisonPin.subject == pin.subject, ComparisonPin.cell == pin.cell)
        .where(ComparisonPin.series < pin.series)
        .order_by(ComparisonPin.series.desc())
        .limit(1)
    ).first()
    old = f"series {before.series} at {before.config}" if before else "the earlier series"
    return Finding(
        kind=FindingKind.comparison_point_changed,
        severity=Severity.info,
        subject=subject,
        message=(
            f"{subject} on {pin.cell}: series {pin.series} of its comparison point starts "
            f"here, at {pin.config} ({pin.reason}); {old} stays readable on the trends page, "
            "and bits and cost are compared within a series only"
        ),
    )


def history_rows(session: Session, build_id: int) -> list[HistoryRow]:
    rows = session.execute(
        select(DeterminismRecord, ComparisonPin, Job.cell)
        .outerjoin(ComparisonPin, ComparisonPin.id == DeterminismRecord.pin_id)
        .outerjoin(Job, Job.id == DeterminismRecord.job_id)
        .where(DeterminismRecord.build_id == build_id)
        .order_by(DeterminismRecord.id)
    ).all()
    out = []
    for r, pin, cell in rows:
        first = pin is not None and pin.series > 1 and _opens_series(session, r)
        out.append(
            HistoryRow(
                job_id=r.job_id,
                family=r.family,
                cell=cell or r.family,
                subject=r.subject,
                config=r.config,
                bits=r.bits,
                changed=r.changed,
                previous_build_id=r.previous_build_id,
                cost_ratio=r.cost_ratio,
                previous_cost_ratio=r.previous_cost_ratio,
                cost_regressed=r.cost_regressed,
                timer=r.timer,
                series=pin.series if pin else None,
                series_start=first,
                **(r.cost_band or {}),
            )
        )
    return out


def _opens_series(session: Session, record: DeterminismRecord) -> bool:
    """Whether no earlier build has a record of the record's series."""
    earlier = session.scalar(
        select(DeterminismRecord.id)
        .where(DeterminismRecord.pin_id == record.pin_id)
        .where(DeterminismRecord.build_id < record.build_id)
        .limit(1)
    )
    return earlier is None
