"""Feature regression across a build's line, on a real SQLite database at the newest schema.

The build's capabilities are merged across its jobs by the report's one rule (a job that read
the knob wins over one that could not), and the line compares exactly what the report shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.wire import RELEASES
from service.config import Settings
from service.db import make_engine, migrate
from service.models import Build, CapabilityRow, FindingRow, Job
from service.results import feature_regression
from service.results.assemble import build_report, merge_capabilities
from service.web.queries import load_caps

SUBJECT = "grouped_gemm_dglu"
READ = {"importable": True, "present": True, "default": "False", "method": "signature"}
UNREAD = {"importable": False, "present": False, "method": None, "error": "ImportError: no GPU"}


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    url = f"sqlite:///{tmp_path / 'fe-ci.sqlite3'}"
    migrate(url)
    engine = make_engine(url)
    with Session(engine) as s:
        yield s
    engine.dispose()


def _build(
    session: Session,
    version: str,
    *caps: dict[str, object],
    source: str = "wheel",
    branch: str | None = None,
) -> tuple[Build, Job]:
    """A build (a wheel's by default) whose jobs each probed the subject once, in this order."""
    build = Build(source=source, version=version, filename=f"w-{version}.whl", branch=branch)
    session.add(build)
    session.flush()
    job = None
    for i, cap in enumerate(caps):
        job = Job(build_id=build.id, kind="cpu" if i == 0 else "gpu", stages=["probe"])
        session.add(job)
        session.flush()
        session.add(
            CapabilityRow(build_id=build.id, job_id=job.id, subject=SUBJECT, knob="deterministic",
                          entry_point="cudnn.grouped_gemm_dglu_wrapper_sm100", **cap)
        )  # fmt: skip
    session.flush()
    assert job is not None
    return build, job


def _regressions(session: Session, build: Build, job: Job) -> list[FindingRow]:
    feature_regression.add_line_findings(session, build, job)
    session.flush()
    return list(
        session.scalars(
            select(FindingRow).where(
                FindingRow.build_id == build.id, FindingRow.kind == "feature_regression"
            )
        )
    )


def test_a_job_that_read_the_knob_outweighs_one_that_could_not(session: Session) -> None:
    _build(session, "1.31.0", READ)
    build, job = _build(session, "1.32.0", UNREAD, READ)  # the unread row comes first
    assert build_report(session, build, Settings()).capabilities[SUBJECT].present is True
    assert _regressions(session, build, job) == []


def test_a_knob_no_job_can_reach_is_a_regression(session: Session) -> None:
    _build(session, "1.31.0", READ)
    build, job = _build(session, "1.32.0", UNREAD, UNREAD)
    (found,) = _regressions(session, build, job)
    assert found.subject == SUBJECT and found.severity == "error"
    assert build_report(session, build, Settings()).capabilities[SUBJECT].importable is False


def test_a_release_compares_with_the_previous_release_of_its_line(session: Session) -> None:
    """Not with an uploaded wheel nor a commit build in between, whatever their versions."""
    before, _ = _build(session, "1.31.0", READ, source="release", branch=RELEASES)
    _build(session, "1.31.5", READ)
    _build(session, "1.31.9", READ, source="commit", branch="develop")
    build, job = _build(session, "1.32.0", UNREAD, UNREAD, source="release", branch=RELEASES)
    assert feature_regression.previous_build(session, build) is before
    (found,) = _regressions(session, build, job)
    assert found.subject == SUBJECT and found.severity == "error"


@pytest.mark.parametrize(
    ("caps", "speaks"),
    [
        ((UNREAD, READ), 1),  # a job that read the knob beats one that could not
        ((READ, UNREAD), 0),
        ((READ, {**READ, "present": False}), 0),  # two readings: the first job's
        ((UNREAD, {**UNREAD, "error": "later"}), 0),
    ],
)
def test_the_grid_and_the_report_take_the_same_jobs_capability(
    session: Session, caps: tuple[dict[str, object], ...], speaks: int
) -> None:
    build, _job = _build(session, "1.32.0", *caps)
    rows = session.scalars(
        select(CapabilityRow).where(CapabilityRow.build_id == build.id).order_by(CapabilityRow.id)
    ).all()
    expected = rows[speaks]
    report = merge_capabilities(rows)[SUBJECT]
    grid = load_caps(session, [build.id])[build.id][SUBJECT]
    assert (report.present, report.error) == (expected.present, expected.error)
    assert (grid.present, grid.error) == (expected.present, expected.error)
