"""Stored rows to the build report (core/wire/report.py), and a runner's stage result to rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core import gate
from core.verdict import OPEN_JOBS
from core.wire import (
    BuildReport,
    BuildStatus,
    BuildSummary,
    Capability,
    Check,
    DriftReport,
    Environment,
    Finding,
    JobKind,
    JobOutcome,
    JobReport,
    JobState,
    RefusalReport,
    Severity,
    Stage,
    StageResult,
    Status,
    SurfaceKnob,
    Verdict,
)
from service.config import Settings
from service.jobs import capable
from service.models import (
    Build,
    CapabilityRow,
    CheckRow,
    DriftRowDB,
    FindingRow,
    Job,
    RefusalRowDB,
    StageRow,
    utcnow,
)
from service.results import reused_refusal
from service.results.determinism_records import history_rows

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_STAGE_INDEX = {s: i for i, s in enumerate(Stage)}


def status_of(*, cancelled: bool, job_states: Iterable[str]) -> BuildStatus:
    """A build's status from whether it was cancelled and its jobs' states: the one rule."""
    if cancelled:
        return BuildStatus.cancelled
    states = set(job_states)
    if states and states.isdisjoint(OPEN_JOBS):
        return BuildStatus.finished
    if states & {JobState.leased, JobState.finished}:
        return BuildStatus.running
    return BuildStatus.queued


def build_status(build: Build) -> BuildStatus:
    return status_of(
        cancelled=build.cancelled_at is not None, job_states=(j.state for j in build.jobs)
    )


def stored(model: type[M], **values: Any) -> M:
    """A model of rows the service stored, not validated again: they passed the runner
    protocol's door when they came in, and a bound tightened since (or a NaN a report kept
    before the door refused them) must not make an old build's report unreadable."""
    return model.model_construct(**{k: v for k, v in values.items() if k in model.model_fields})


def _stage_result(row: StageRow) -> StageResult:
    return stored(
        StageResult,
        name=Stage(row.name),
        status=Status(row.status),
        reason=row.reason,
        duration_s=row.duration_s,
        version=row.version,
        log_tail=row.log_tail,
        timings=row.timings or {},
        checks=[
            stored(Check, name=c.name, status=Status(c.status), detail=c.detail, metrics=c.metrics)
            for c in row.checks
        ],
    )


def replaces(held_method: str | None, method: str | None, *, held: bool) -> bool:
    """Across a build's jobs (rows in id order), which probe speaks for a subject: the first one,
    unless it could not read the knob (no method answered) and a later one could. The report and
    the grid both decide with this."""
    return not held or (bool(method) and not held_method)


def merge_capabilities(rows: Iterable[CapabilityRow]) -> dict[str, Capability]:
    """One view per subject across jobs: a job that read the knob wins over one that could not.

    The build's capabilities in its report, and what the next build of its line is compared
    with (``feature_regression.py``), as ``fe-ci validate --previous REPORT.json`` compares
    with a report's.
    """
    out: dict[str, Capability] = {}
    for row in rows:
        cap = stored(
            Capability,
            importable=row.importable,
            knob=row.knob,
            present=row.present,
            default=row.default,
            method=row.method,
            error=row.error,
            entry_point=row.entry_point,
        )
        held = out.get(row.subject)
        if replaces(held.method if held else None, cap.method, held=held is not None):
            out[row.subject] = cap
    return out


def build_report(session: Session, build: Build) -> BuildReport:
    jobs = session.scalars(
        select(Job)
        .where(Job.build_id == build.id)
        .options(
            selectinload(Job.stage_rows).selectinload(StageRow.checks), selectinload(Job.runner)
        )
        .order_by(Job.id)
    ).all()
    families = {j.id: j.family for j in jobs}
    settings = session.info.get("settings")
    require = settings.require if isinstance(settings, Settings) else [gate.ALL]
    fleet = _fleet(session, settings, jobs)
    job_reports = [
        JobReport(
            id=j.id,
            kind=JobKind(j.kind),
            family=j.family,
            runner=j.runner.name if j.runner else None,
            attempt=j.attempt,
            status=JobState(j.state),
            outcome=JobOutcome(j.outcome) if j.outcome else None,
            reason=j.reason,
            environment=stored(Environment, **(j.environment or {})),
            stages=sorted(
                (_stage_result(s) for s in j.stage_rows), key=lambda s: _STAGE_INDEX[s.name]
            ),
            waiting=capable.waiting_reason(j.kind, j.family, fleet)
            if fleet is not None and j.state == JobState.queued
            else None,
        )
        for j in jobs
    ]
    job_reports = reused_refusal.attach(job_reports, jobs)
    findings = _rows(session, FindingRow, build.id)
    caps = _rows(session, CapabilityRow, build.id)
    drift = _rows(session, DriftRowDB, build.id)
    refusal = _rows(session, RefusalRowDB, build.id)
    report = BuildReport(
        id=build.id,
        source=build.source,
        version=build.version,
        sha256=build.sha256,
        filename=build.filename,
        repo=build.repo,
        commit=build.commit,
        branch=build.branch,
        submitted_by=build.submitted_by,
        created_at=build.created_at,
        status=build_status(build),
        verdict=Verdict.pending,
        capabilities=merge_capabilities(caps),
        findings=once_per_build(findings),
        jobs=job_reports,
        drift=[
            stored(DriftReport, **{**_columns(d), "family": families.get(d.job_id or 0)})
            for d in drift
        ],
        refusal=[
            stored(RefusalReport, **{**_columns(r), "status": Status(r.status)}) for r in refusal
        ],
        history=history_rows(session, build.id),
        surface=surface_of(j.stage_rows for j in jobs),
    )
    return gate.conclude(report, require)


def surface_of(stages: Iterable[Iterable[StageRow]]) -> list[SurfaceKnob]:
    """A build's surface: the first of its jobs' probes that discovered one (each job probes the
    same build, so each finds the same)."""
    for rows in stages:
        for row in rows:
            if row.name == Stage.probe and row.surface:
                return [stored(SurfaceKnob, **k) for k in row.surface]
    return []


def _fleet(session: Session, settings: object, jobs: Iterable[Job]) -> set[str] | None:
    """The alive runners' capabilities, looked up only when a job is queued."""
    if not isinstance(settings, Settings) or not any(j.state == JobState.queued for j in jobs):
        return None
    return capable.alive(session, settings, utcnow())


def once_per_build(rows: list[FindingRow]) -> list[Finding]:
    """One finding per (kind, severity, subject, message), with every job that reported it.

    Each job of a build probes the same wheel, so each posts the same probe findings; a reader
    needs them once. Rows with no job (the line's findings) list no job.
    """
    out: dict[tuple[str, str, str | None, str], Finding] = {}
    for row in rows:
        key = (row.kind, row.severity, row.subject, row.message)
        held = out.get(key)
        if held is None:
            held = out[key] = stored(
                Finding,
                kind=row.kind,
                severity=Severity(row.severity),
                subject=row.subject,
                message=row.message,
                job_ids=[],
            )
        if row.job_id is not None and row.job_id not in held.job_ids:
            held.job_ids.append(row.job_id)
    return list(out.values())


def _rows(session: Session, table: type[T], build_id: int) -> list[T]:
    column = table.build_id  # type: ignore[attr-defined]
    stmt = select(table).where(column == build_id).order_by(table.id)  # type: ignore[attr-defined]
    return list(session.scalars(stmt))


def _columns(row: object) -> dict[str, object]:
    table = row.__table__  # type: ignore[attr-defined]
    return {c.name: getattr(row, c.name) for c in table.columns}


def summary(build: Build) -> BuildSummary:
    return BuildSummary(
        id=build.id,
        source=build.source,
        version=build.version,
        filename=build.filename,
        commit=build.commit,
        branch=build.branch,
        status=build_status(build),
        verdict=Verdict(build.verdict),
        created_at=build.created_at,
        url=f"/builds/{build.id}",
    )


def store_stage(session: Session, job: Job, result: StageResult) -> StageRow:
    """Write one stage's result and everything it carries.

    Idempotent: a runner that retries a post whose answer it lost gets the stored stage back.
    """
    old = session.scalars(
        select(StageRow).where(StageRow.job_id == job.id, StageRow.name == result.name)
    ).first()
    if old is not None:
        return old
    row = StageRow(
        job_id=job.id,
        name=result.name,
        status=result.status,
        reason=result.reason,
        duration_s=result.duration_s,
        version=result.version,
        log_tail=result.log_tail[-4000:],
        timings=result.timings,
        surface=[k.model_dump() for k in result.surface],
        checks=[
            CheckRow(name=c.name, status=c.status, detail=c.detail, metrics=c.metrics)
            for c in result.checks
        ],
    )
    session.add(row)
    ids = {"build_id": job.build_id, "job_id": job.id}
    for f in result.findings:
        session.add(FindingRow(**ids, **f.model_dump(exclude={"job_ids"})))
    for subject, cap in result.capabilities.items():
        session.add(CapabilityRow(**ids, subject=subject, **cap.model_dump()))
    for d in result.drift:
        session.add(DriftRowDB(**ids, family=job.family, **d.model_dump()))
    for r in result.refusal:
        session.add(RefusalRowDB(**ids, **r.model_dump()))
    if result.version and result.name in (Stage.install, Stage.probe):
        job.build.version = result.version
    return row
