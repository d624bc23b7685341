"""The service's report and ``fe-ci validate``'s are one assembler's: the same stage results,
stored through the service's stage post (a real SQLite database at the newest schema) and handed
to ``fe-ci validate``'s local report, give the same findings, capabilities, drift, refusal rows,
surface and verdict."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from core.wire import (
    Capability,
    Check,
    DriftRow,
    Finding,
    RefusalRow,
    Severity,
    Stage,
    StageResult,
    Status,
    SurfaceKnob,
)
from runner.pipeline.localreport import local_report
from runner.pipeline.stage_results import Result
from service.config import Settings
from service.db import make_engine, migrate
from service.models import Build, Job
from service.results.assemble import build_report, store_stage

WARN = Finding(kind="ledger", severity=Severity.warning, subject="sdpa_bwd", message="drifted")
UNREAD = Capability(importable=False, knob="deterministic", present=False, error="no GPU")
READ = Capability(
    importable=True, knob="deterministic", present=True, default="False", method="signature"
)


def _stages() -> list[StageResult]:
    """A CPU job's stages: the same warning twice (install and probe both saw it), a subject its
    install could not read and its probe could, drift and refusal rows, a surface."""
    knob = SurfaceKnob(
        entry_point="cudnn.sdpa", knob="deterministic", kind="parameter", method="ast"
    )
    drift = DriftRow(
        subject="sdpa_bwd", output="dq", arm="control", runs=3, differing=0, distinct=1,
        max_abs_diff=0.0, finite=True,
    )  # fmt: skip
    refusal = RefusalRow(
        activation="relu", request="det", scale_bias=False, fc1_bias=False, unit_scale=False,
        expected="refuse", observed="refuse", status=Status.pass_,
    )  # fmt: skip
    return [
        StageResult(
            name=Stage.install, status=Status.pass_, findings=[WARN],
            capabilities={"sdpa_bwd": UNREAD},
        ),
        StageResult(
            name=Stage.probe, status=Status.pass_, findings=[WARN],
            capabilities={"sdpa_bwd": READ}, surface=[knob], drift=[drift],
        ),
        StageResult(name=Stage.refusal, status=Status.pass_, refusal=[refusal]),
    ]  # fmt: skip


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    url = f"sqlite:///{tmp_path / 'fe-ci.sqlite3'}"
    migrate(url)
    engine = make_engine(url)
    with Session(engine) as s:
        yield s
    engine.dispose()


def test_the_service_and_validate_assemble_the_same_report(session: Session) -> None:
    stages = _stages()
    build = Build(source="wheel", version="1.32.0", filename="w-1.32.0.whl")
    session.add(build)
    session.flush()
    job = Job(build_id=build.id, kind="cpu", stages=[s.name.value for s in stages])
    session.add(job)
    session.flush()
    for stage in stages:
        store_stage(session, job, stage)
    job.state = "finished"
    session.flush()
    service = build_report(session, build, Settings())

    result = Result(stages=stages, capabilities={"sdpa_bwd": UNREAD}, version="1.32.0")
    local = local_report(result, wheel=None, family=None, version="1.32.0")

    def findings(report: object) -> list[tuple[str, str, str | None, str]]:
        return [(f.kind, f.severity, f.subject, f.message) for f in report.findings]  # type: ignore[attr-defined]

    assert findings(service) == findings(local) == [("ledger", "warning", "sdpa_bwd", "drifted")]
    assert service.findings[0].job_ids == [job.id] and local.findings[0].job_ids == []
    assert service.capabilities == local.capabilities == {"sdpa_bwd": READ}
    drop = {"job_id"}
    assert [d.model_dump(exclude=drop) for d in service.drift] == [
        d.model_dump(exclude=drop) for d in local.drift
    ]
    assert [r.model_dump(exclude=drop) for r in service.refusal] == [
        r.model_dump(exclude=drop) for r in local.refusal
    ]
    assert service.surface == local.surface and len(local.surface) == 1
    assert (service.verdict, service.verdict_reason) == (local.verdict, local.verdict_reason)


CARRIED = {"findings", "capabilities", "drift", "refusal", "surface"}


def test_a_stage_is_stored_whole_and_the_report_shows_it_as_posted(session: Session) -> None:
    """Each stage's result is one stored document: the report's stage is what the runner posted
    (what it carried is shown once per build), every field of it, so a field added to
    ``StageResult`` reaches the report with no column, no migration and no assembler change."""
    probe = StageResult(
        name=Stage.probe,
        status=Status.pass_,
        reason="4 subjects probed",
        duration_s=2.5,
        version="1.32.0",
        log_tail="x" * 5000 + "the end",
        timings={"stage": {"import_s": 0.25}},
        checks=[Check(name="sdpa_bwd.knob", status=Status.pass_, detail="found")],
        capabilities={"sdpa_bwd": READ},
    )
    build = Build(source="wheel", version="1.32.0", filename="w-1.32.0.whl")
    session.add(build)
    session.flush()
    job = Job(build_id=build.id, kind="cpu", stages=["probe"], state="finished")
    session.add(job)
    session.flush()
    row = store_stage(session, job, probe)
    session.flush()
    assert row.result["timings"] == {"stage": {"import_s": 0.25}}  # stored as posted
    (shown,) = build_report(session, build, Settings()).jobs[0].stages
    posted = probe.model_dump(mode="json", exclude=CARRIED)
    posted["log_tail"] = posted["log_tail"][-4000:]  # the end of a log is what is kept
    assert shown.model_dump(mode="json", exclude=CARRIED) == posted


def test_the_stages_columns_are_what_is_queried_across_builds() -> None:
    """Beside the stored document, a stage's row keeps as columns only what the grid, the trends
    and the line's feature regressions query across builds: a new stage field needs no column,
    and what only the report reads (the refusal rows) has no table of its own."""
    from service.models import Base, StageRow

    assert "refusal_rows" not in Base.metadata.tables

    columns = set(StageRow.__table__.columns.keys())
    assert columns & set(StageResult.model_fields) == {
        "name",
        "status",
        "reason",
        "duration_s",
        "surface",
    }
    assert "result" in columns
