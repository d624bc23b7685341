"""Feature regression across a build's line: what the previous build had and this one lacks.

The previous build of the line is, for commit builds, the newest earlier build of the same branch
(a bisection's step builds are not part of it; a step compares with its bisection's good build);
for release builds, the newest earlier build of the releases line; for wheels, the build with the
highest lower version.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from core import regression, surface
from core.bounds import clip
from core.kinds import FindingKind
from core.wire import BuildSource, Capability, Finding, Severity, StageResult
from service.models import Bisection, Build, CapabilityRow, FindingRow, Job, StageRow
from service.results.assemble import merge_capabilities

LINE_KINDS = (FindingKind.feature_regression, *surface.LINE_KINDS)


def _capabilities(session: Session, build_id: int) -> dict[str, Capability]:
    rows = session.scalars(
        select(CapabilityRow).where(CapabilityRow.build_id == build_id).order_by(CapabilityRow.id)
    )
    return merge_capabilities(rows)


def _surface(session: Session, build_id: int) -> list[dict[str, object]] | None:
    """The first probe's surface of a build; None where no probe of it discovered one."""
    rows = session.scalars(
        select(StageRow.surface)
        .join(Job, Job.id == StageRow.job_id)
        .where(Job.build_id == build_id, StageRow.name == "probe")
        .order_by(StageRow.id)
    )
    return next((r for r in rows if r), None)


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


def previous_build(session: Session, build: Build) -> Build | None:
    probed = select(CapabilityRow.build_id).distinct()
    if build.bisection_id is not None:  # a bisection's step compares with its good build
        bisection = session.get(Bisection, build.bisection_id)
        good = bisection.good_build_id if bisection else None
        return session.get(Build, good) if good else None
    if build.source in (BuildSource.commit, BuildSource.release):
        return session.scalars(
            select(Build)
            .where(Build.source == build.source, Build.branch == build.branch, Build.id < build.id)
            .where(Build.id.in_(probed), Build.bisection_id.is_(None))
            .order_by(Build.id.desc())
        ).first()
    mine = _version(build.version)
    if mine is None:
        return None
    best: tuple[Version, int, Build] | None = None
    for other in session.scalars(
        select(Build).where(Build.source == "wheel", Build.id != build.id, Build.id.in_(probed))
    ):
        theirs = _version(other.version)
        if theirs is not None and theirs < mine and (best is None or (theirs, other.id) > best[:2]):
            best = (theirs, other.id, other)
    return best[2] if best else None


def with_line_severity(session: Session, build: Build, result: StageResult) -> StageResult:
    """A probe's ``import_error`` is an error when the previous build of the line imported it."""
    prev = previous_build(session, build)
    if prev is None or not result.findings:
        return result
    findings = regression.upgrade_import_errors(result.findings, _capabilities(session, prev.id))
    return result.model_copy(update={"findings": findings})


def add_line_findings(session: Session, build: Build, job: Job) -> None:
    """Compare this job's probe with the previous build of the line; store what regressed."""
    prev = previous_build(session, build)
    if prev is None:
        return
    session.execute(
        delete(FindingRow).where(
            FindingRow.build_id == build.id,
            FindingRow.job_id.is_(None),
            FindingRow.kind.in_(LINE_KINDS),
        )
    )
    previous = _capabilities(session, prev.id)
    failed = session.execute(
        select(FindingRow.subject)
        .where(FindingRow.build_id == build.id, FindingRow.kind == regression.IMPORT_ERROR)
        .distinct()
    ).scalars()
    imports = [
        Finding(kind=regression.IMPORT_ERROR, severity=Severity.warning, subject=s, message="")
        for s in failed
    ]
    current = _capabilities(session, build.id)
    found = regression.regressions(previous, current, findings=imports)
    before, now = _surface(session, prev.id), _surface(session, build.id)
    if before is not None and now is not None:
        found += [Finding.model_validate(f) for f in surface.changes(before, now)]
    for finding in found:
        session.add(
            FindingRow(
                build_id=build.id,
                job_id=None,
                kind=finding.kind,
                severity=finding.severity,
                subject=finding.subject,
                message=clip(f"{finding.message} (previous build #{prev.id}, {prev.version})"),
            )
        )
    del job
