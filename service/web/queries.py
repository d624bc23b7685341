"""The grid's data: one page of builds and what their cells need, in a fixed handful of queries.

A page costs seven SELECTs whatever its size (builds, jobs with runners, stages, the checks that
did not pass, determinism checks, findings, capabilities) plus one for the alive runners, and one
for the stored gates where the required checks are not ``all``; no build report per row.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import JSON, cast, select
from sqlalchemy.orm import Session

from core import gate
from core.assemble import replaces
from core.subjects import SUBJECTS
from core.verdict import NOT_PASSED
from core.wire import STAGE_ORDER, Conclusion, Stage, Verdict
from service.config import Settings
from service.jobs import capable
from service.models import (
    Build,
    CapabilityRow,
    CheckRow,
    FindingRow,
    FinishedReport,
    Job,
    Runner,
    StageRow,
)
from service.results import stored_reports
from service.results.assemble import status_of
from service.results.build_list import filtered_builds
from service.web.cells import (
    CapView,
    Cell,
    CheckView,
    JobView,
    StageView,
    gate_cell,
    stage_cells,
    subject_cell,
    verdict_cell,
    worst,
)

PAGE_SIZE = 50
SEVERITIES = ("error", "warning", "info")


@dataclass
class FindingView:
    severity: str
    kind: str
    subject: str | None
    message: str


@dataclass
class GridRow:
    id: int
    source: str
    version: str | None
    filename: str | None
    sha256: str | None
    repo: str | None
    commit: str | None
    branch: str | None
    message: str | None
    submitted_by: str | None
    created_at: datetime
    status: str
    verdict: Cell
    stages: dict[str, list[Cell]]
    subjects: dict[str, Cell]
    findings: list[FindingView] = field(default_factory=list)
    rerun_of: int | None = None
    gate: Cell = field(default_factory=lambda: gate_cell(Conclusion.pending, ""))

    @property
    def severity_counts(self) -> list[tuple[str, int]]:
        counts = Counter(f.severity for f in self.findings)
        return [(s, counts[s]) for s in SEVERITIES if counts[s]]

    @property
    def worst_severity(self) -> str | None:
        return next((s for s, _ in self.severity_counts), None)


@dataclass
class GridPage:
    rows: list[GridRow]
    next_cursor: int | None


def load_jobs(session: Session, build_ids: list[int]) -> dict[int, list[JobView]]:
    """Jobs of these builds with their stage rows (no log tails), grouped by build."""
    if not build_ids:
        return {}
    stmt = (
        select(
            Job.id,
            Job.build_id,
            Job.kind,
            Job.family,
            Job.stages,
            Job.state,
            Job.outcome,
            Job.reason,
            Job.attempt,
            Runner.name,
            Job.started_at,
            Job.finished_at,
            Job.cell,
        )
        .outerjoin(Runner, Runner.id == Job.runner_id)
        .where(Job.build_id.in_(build_ids))
        .order_by(Job.id)
    )
    jobs: dict[int, JobView] = {}
    for *view, cell in session.execute(stmt):
        jobs[view[0]] = JobView(*view)
        jobs[view[0]].cell = cell
    if jobs:
        stages = select(
            StageRow.job_id,
            StageRow.name,
            StageRow.status,
            StageRow.reason,
            StageRow.duration_s,
            StageRow.created_at,
        ).where(StageRow.job_id.in_(list(jobs)))
        for row in session.execute(stages):
            jobs[row[0]].rows[row[1]] = StageView(*row)
        _worst_checks(session, jobs)
    out: dict[int, list[JobView]] = defaultdict(list)
    for job in jobs.values():
        out[job.build_id].append(job)
    return out


def _worst_checks(session: Session, jobs: dict[int, JobView]) -> None:
    """Each stage row's worst check that did not pass (one SELECT for every job)."""
    stmt = (
        select(StageRow.job_id, StageRow.name, CheckRow.status, CheckRow.name, CheckRow.detail)
        .join(StageRow, StageRow.id == CheckRow.stage_id)
        .where(StageRow.job_id.in_(list(jobs)), CheckRow.status.in_(sorted(NOT_PASSED)))
    )
    for job_id, stage, status, name, detail in session.execute(stmt):
        row = jobs[job_id].rows.get(stage)
        if row is None:
            continue
        held = row.worst_check
        if held is None or worst((status, held[0])) != held[0]:
            row.worst_check = (status, f"{name}: {detail}"[:500])


def load_subject_checks(session: Session, job_ids: list[int]) -> dict[int, list[CheckView]]:
    """The ``<subject>.deterministic`` checks of the determinism stages, by job."""
    if not job_ids:
        return {}
    stmt = (
        select(StageRow.job_id, CheckRow.name, CheckRow.status, CheckRow.detail)
        .join(StageRow, StageRow.id == CheckRow.stage_id)
        .where(StageRow.job_id.in_(job_ids), StageRow.name == Stage.determinism)
        .where(CheckRow.name.like("%.deterministic"))
    )
    out: dict[int, list[CheckView]] = defaultdict(list)
    for row in session.execute(stmt):
        out[row[0]].append(CheckView(*row))
    return out


def load_findings(session: Session, build_ids: list[int]) -> dict[int, list[FindingView]]:
    stmt = select(
        FindingRow.build_id,
        FindingRow.severity,
        FindingRow.kind,
        FindingRow.subject,
        FindingRow.message,
    ).where(FindingRow.build_id.in_(build_ids))
    out: dict[int, list[FindingView]] = defaultdict(list)
    for build_id, severity, kind, subject, message in session.execute(stmt.distinct()):
        out[build_id].append(FindingView(severity, kind, subject, message))  # once per build
    return out


def load_caps(session: Session, build_ids: list[int]) -> dict[int, dict[str, CapView]]:
    """One capability per subject and build; a job whose probe read the knob wins."""
    stmt = select(
        CapabilityRow.build_id,
        CapabilityRow.subject,
        CapabilityRow.importable,
        CapabilityRow.present,
        CapabilityRow.error,
        CapabilityRow.knob,
        CapabilityRow.method,
    ).where(CapabilityRow.build_id.in_(build_ids))
    out: dict[int, dict[str, CapView]] = defaultdict(dict)
    methods: dict[tuple[int, str], str | None] = {}
    rows = session.execute(stmt.order_by(CapabilityRow.id))
    for build_id, subject, importable, present, error, knob, method in rows:
        key = (build_id, subject)
        if replaces(methods.get(key), method, held=key in methods):
            out[build_id][subject] = CapView(subject, importable, present, error, knob)
            methods[key] = method
    return out


def gates_of(session: Session, settings: Settings, builds: list[Build]) -> dict[int, Cell]:
    """Each build's gate: under the default requirement (``all``) it follows the verdict (no
    query); else a finished build's is its stored report's (one SELECT; one stored under other
    required checks is made again, once, as the build page would), an open one's pending."""
    require = settings.require or [gate.ALL]
    out = {b.id: gate_cell(gate.of_verdict(Verdict(b.verdict)), b.verdict_reason) for b in builds}
    if gate.ALL in require:
        return out
    ended = {b.id: b for b in builds if b.verdict != Verdict.pending}
    for b in builds:
        if b.id not in ended:
            out[b.id] = gate_cell(Conclusion.pending, "the build still runs")
    body = cast(FinishedReport.body, JSON)
    stmt = select(
        FinishedReport.build_id,
        body[("gate", "conclusion")].as_string(),
        body[("gate", "reason")].as_string(),
    ).where(
        FinishedReport.build_id.in_(list(ended)),
        FinishedReport.revision == stored_reports.revision(settings.require),
    )
    for build_id, conclusion, reason in session.execute(stmt):
        if conclusion in Conclusion.__members__:
            out[build_id] = gate_cell(Conclusion(conclusion), reason or "")
            del ended[build_id]
    for build in ended.values():
        judged = stored_reports.current(session, build, settings).gate
        if judged is not None:
            out[build.id] = gate_cell(judged.conclusion, judged.reason)
    return out


def alive(session: Session, settings: Settings, now: datetime) -> set[str]:
    return capable.alive(session, settings, now)


def grid_page(
    session: Session,
    settings: Settings,
    now: datetime,
    *,
    cursor: int | None = None,
    source: str | None = None,
    branch: str | None = None,
    verdict: str | None = None,
    limit: int = PAGE_SIZE,
) -> GridPage:
    stmt = filtered_builds(cursor=cursor, source=source, branch=branch, verdict=verdict)
    builds: list[Build] = list(session.scalars(stmt.limit(limit + 1)))
    more = len(builds) > limit
    builds = builds[:limit]
    ids = [b.id for b in builds]
    jobs = load_jobs(session, ids)
    checks = load_subject_checks(session, [j.id for js in jobs.values() for j in js])
    findings = load_findings(session, ids) if ids else {}
    caps = load_caps(session, ids) if ids else {}
    alive_ = alive(session, settings, now)
    gates = gates_of(session, settings, builds)
    rows = [
        grid_row(b, jobs.get(b.id, []), checks, findings.get(b.id, []), caps.get(b.id, {}), alive_)
        for b in builds
    ]
    for row in rows:
        row.gate = gates[row.id]
    return GridPage(rows=rows, next_cursor=builds[-1].id if more else None)


def grid_row(
    build: Build,
    jobs: list[JobView],
    checks: dict[int, list[CheckView]],
    findings: list[FindingView],
    caps: dict[str, CapView],
    families: set[str],
) -> GridRow:
    cancelled = build.cancelled_at is not None
    build_checks = [c for j in jobs for c in checks.get(j.id, [])]
    errors = [(f.kind, f.message) for f in findings if f.severity == "error"]
    return GridRow(
        id=build.id,
        source=build.source,
        version=build.version,
        filename=build.filename,
        sha256=build.sha256,
        repo=build.repo,
        commit=build.commit,
        branch=build.branch,
        message=build.message,
        submitted_by=build.submitted_by,
        created_at=build.created_at,
        status=status_of(cancelled=cancelled, job_states=(j.state for j in jobs)).value,
        verdict=verdict_cell(build.verdict, build.verdict_reason, jobs),
        stages={
            s.value: stage_cells(
                source=build.source,
                cancelled=cancelled,
                stage=s,
                jobs=jobs,
                alive=families,
                errors=errors,
            )
            for s in STAGE_ORDER
        },
        subjects={
            name: subject_cell(
                name,
                cancelled=cancelled,
                jobs=jobs,
                checks=[c for c in build_checks if c.subject == name],
                cap=caps.get(name),
                alive=families,
            )
            for name in SUBJECTS
        },
        findings=sorted(findings, key=lambda f: SEVERITIES.index(f.severity)),
        rerun_of=build.rerun_of,
    )
