"""Stored rows to the build report (core/wire/report.py), and a runner's stage result to rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core import assemble as assembler
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
    FindingRow,
    Job,
    StageRow,
    StoredDriftRow,
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


# What a stage carried that the report shows once per build, from the tables (findings,
# capabilities, drift, refusal rows) and the first probe (surface), not under the stage.
_CARRIED = frozenset({"findings", "capabilities", "drift", "refusal", "surface"})
STORED_LOG_TAIL = 4000  # the end of a stage's log its stored result keeps


def stage_document(result: StageResult) -> dict[str, Any]:
    """A stage's result as it is stored whole (``StageRow.result``)."""
    document = result.model_dump(mode="json")
    document["log_tail"] = result.log_tail[-STORED_LOG_TAIL:]
    return document


def _stage_result(row: StageRow) -> StageResult:
    """A stored stage as the report's job shows it: its stored result but what it carried. A
    field added to ``StageResult`` is stored and read with no change here."""
    document = row.result
    return stored(
        StageResult,
        **{
            **{k: v for k, v in document.items() if k not in _CARRIED},
            "name": Stage(row.name),
            "status": Status(row.status),
            "checks": [
                stored(Check, **{**c, "status": Status(c["status"])})
                for c in document.get("checks", ())
            ],
        },
    )


def capabilities_of(rows: Iterable[CapabilityRow]) -> list[tuple[str, Capability]]:
    """Capability rows as the wire's, in the order given."""
    return [
        (
            row.subject,
            stored(
                Capability,
                importable=row.importable,
                knob=row.knob,
                present=row.present,
                default=row.default,
                method=row.method,
                error=row.error,
                entry_point=row.entry_point,
            ),
        )
        for row in rows
    ]


def merge_capabilities(rows: Iterable[CapabilityRow]) -> dict[str, Capability]:
    """One view per subject across a build's jobs (``core.assemble.merge_capabilities``)."""
    return assembler.merge_capabilities(capabilities_of(rows))


def build_report(session: Session, build: Build, settings: Settings) -> BuildReport:
    """The report from the rows as they stand, its gate judged by ``settings.require`` and a
    queued job's wait by the runners alive within ``settings.alive_window``."""
    jobs = session.scalars(
        select(Job)
        .where(Job.build_id == build.id)
        .options(selectinload(Job.stage_rows), selectinload(Job.runner))
        .order_by(Job.id)
    ).all()
    fleet = _fleet(session, settings, jobs)
    job_reports = [
        JobReport(
            id=j.id,
            kind=JobKind(j.kind),
            family=j.family,
            cell=j.cell,
            runner=j.runner.name if j.runner else None,
            attempt=j.attempt,
            status=JobState(j.state),
            outcome=JobOutcome(j.outcome) if j.outcome else None,
            reason=j.reason,
            environment=stored(Environment, **(j.environment or {})),
            stages=sorted(
                (_stage_result(s) for s in j.stage_rows), key=lambda s: _STAGE_INDEX[s.name]
            ),
            waiting=capable.waiting_reason(j.kind, j.family, fleet, j.cell)
            if fleet is not None and j.state == JobState.queued
            else None,
        )
        for j in jobs
    ]
    job_reports = reused_refusal.attach(job_reports, jobs)
    head = BuildReport(
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
        rerun_of=build.rerun_of,
        status=build_status(build),
        verdict=Verdict.pending,
        jobs=job_reports,
        history=history_rows(session, build.id),
    )
    return assembler.assemble(head, _reported(session, build.id, jobs), settings.require)


def _reported(session: Session, build_id: int, jobs: Iterable[Job]) -> assembler.Reported:
    """The build's rows as the wire's models, in the order they were stored."""
    families = {j.id: j.family for j in jobs}
    cells = {j.id: j.cell for j in jobs}
    return assembler.Reported(
        findings=[
            (
                row.job_id,
                stored(
                    Finding,
                    kind=row.kind,
                    severity=Severity(row.severity),
                    subject=row.subject,
                    message=row.message,
                ),
            )
            for row in _rows(session, FindingRow, build_id)
        ],
        capabilities=capabilities_of(_rows(session, CapabilityRow, build_id)),
        drift=[
            stored(
                DriftReport,
                **{
                    **_columns(d),
                    "family": families.get(d.job_id or 0),
                    "cell": cells.get(d.job_id or 0),
                },
            )
            for d in _rows(session, StoredDriftRow, build_id)
        ],
        refusal=[  # each refusal stage's rows, in the order the stages were posted
            stored(RefusalReport, **{**r, "job_id": row.job_id, "status": Status(r["status"])})
            for row in sorted((s for j in jobs for s in j.stage_rows), key=lambda s: s.id)
            for r in row.result.get("refusal") or ()
        ],
        surfaces=[
            [stored(SurfaceKnob, **k) for k in row.surface]
            for j in jobs
            for row in j.stage_rows
            if row.name == Stage.probe and row.surface
        ],
    )


def _fleet(session: Session, settings: Settings, jobs: Iterable[Job]) -> set[str] | None:
    """The alive runners' capabilities, looked up only when a job is queued."""
    if not any(j.state == JobState.queued for j in jobs):
        return None
    return capable.alive(session, settings, utcnow())


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
        rerun_of=build.rerun_of,
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
        result=stage_document(result),
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
        session.add(StoredDriftRow(**ids, family=job.family, **d.model_dump()))
    if result.version and result.name in (Stage.install, Stage.probe):
        job.build.version = result.version
    return row
