"""The words the commands print: counts that agree with their nouns, what a waiting build needs
and the command that starts a runner for it, and what did not run, said alike by the verdict
line, the CLI and the JUnit XML (``core/notrun.py``)."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest

from cli.waiting import state_line
from core import notrun
from core.text import plural
from core.wire import (
    BuildReport,
    BuildStatus,
    JobKind,
    JobReport,
    JobState,
    NotRun,
    Stage,
    StageResult,
    Status,
    Verdict,
)
from runner.pipeline.localreport import print_cause
from service.web.junit import junit_xml

SKIPPED = NotRun(
    subject="grouped_gemm_dglu", status=Status.skipped, reason="skipped: no sm_100 runner"
)
ABSENT = NotRun(
    subject="flex_attention_bwd",
    status=Status.not_applicable,
    reason="not importable: No module named 'cudnn.flex_attention'",
)
NO_KNOB = NotRun(
    subject="grouped_gemm_dglu_wrapper", status=Status.not_applicable,
    reason="this build has no 'deterministic'",
)  # fmt: skip


def _report(*jobs: JobReport, not_run: list[NotRun] | None = None) -> BuildReport:
    return BuildReport(
        id=7, source="wheel", status=BuildStatus.finished, verdict=Verdict.incomplete,
        verdict_reason=notrun.summary(not_run or []), jobs=list(jobs), not_run=not_run or [],
    )  # fmt: skip


def test_a_count_agrees_with_its_noun() -> None:
    assert [plural(n, "stage") for n in (0, 1, 2)] == ["0 stages", "1 stage", "2 stages"]
    assert plural(1, "subject") == "1 subject" and plural(3, "child", "children") == "3 children"


def test_a_running_job_counts_its_stages_in_words() -> None:
    done = [StageResult(name=Stage.install, status=Status.pass_)]
    job = JobReport(kind=JobKind.cpu, status=JobState.leased, runner="vm", stages=done)
    assert "cpu job: running on vm (1 stage done)" in state_line(_report(job))
    job.stages = done * 2
    assert "(2 stages done)" in state_line(_report(job))


@pytest.mark.parametrize(
    ("kind", "family", "waiting", "command"),
    [
        (JobKind.cpu, None, "no runner is alive", "FE_CI_URL=http://h:9 fe-ci runner"),
        (JobKind.gpu, "sm_100", "no runner with arch=sm_100 is alive",
         "on a host with an sm_100 GPU: FE_CI_URL=http://h:9 fe-ci runner"),
        (JobKind.build, None, "no runner with builder=1 is alive",
         "FE_CI_URL=http://h:9 FE_CI_RUNNER_LABELS=builder=1 fe-ci runner"),
    ],
)  # fmt: skip
def test_a_job_no_runner_can_take_says_how_to_start_one(
    kind: JobKind, family: str | None, waiting: str, command: str
) -> None:
    job = JobReport(kind=kind, family=family, status=JobState.queued, waiting=waiting)
    line = state_line(_report(job), "http://h:9")
    assert f"waiting: {waiting}" in line
    assert f"start a runner: {command} " in line, line
    # beside a service at the default address the command is just that
    default = state_line(_report(job), "http://127.0.0.1:8080")
    assert "FE_CI_URL=" not in default
    # a job some alive runner will take gets no such line
    taken = JobReport(kind=kind, family=family, status=JobState.queued)
    assert "start a runner" not in state_line(_report(taken), "http://h:9")


def test_skipped_and_not_applicable_are_said_alike() -> None:
    assert notrun.said_of(SKIPPED) == "skipped: no sm_100 runner"  # the status once
    assert notrun.said(Status.skipped, "excluded by --stages") == "skipped: excluded by --stages"
    assert notrun.said_of(NO_KNOB) == "not applicable: this build has no 'deterministic'"
    assert notrun.said(Status.not_applicable, "not_applicable: x") == "not applicable: x"
    assert notrun.said(Status.skipped, "") == "skipped"
    assert notrun.lines([NO_KNOB, ABSENT, SKIPPED]) == [
        "grouped_gemm_dglu: skipped: no sm_100 runner",
        "flex_attention_bwd: not applicable: not importable: No module named "
        "'cudnn.flex_attention'",
        "grouped_gemm_dglu_wrapper: not applicable: this build has no 'deterministic'",
    ]
    assert notrun.summary([SKIPPED]) == (
        "1 subject did not run: grouped_gemm_dglu: skipped: no sm_100 runner"
    )
    assert notrun.summary([]) == ""


def test_the_cli_the_verdict_line_and_the_junit_name_every_subject_not_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _report(not_run=[SKIPPED, ABSENT, NO_KNOB])
    print_cause(report)
    out = capsys.readouterr().out
    listed = out.split("did not run:\n", 1)[1].splitlines()
    assert listed == [f"  {line}" for line in notrun.lines(report.not_run)]
    for words in notrun.lines(report.not_run):  # on the verdict line too, in the same words
        subject, said = words.split(": ", 1)
        assert subject in report.verdict_reason and said in report.verdict_reason
    root = ET.fromstring(junit_xml(report))
    messages = {
        case.get("name"): case.find("skipped").get("message")  # type: ignore[union-attr]
        for case in root.iter("testcase")
        if case.get("name", "").endswith(".determinism")
    }
    assert messages == {f"{n.subject}.determinism": notrun.said_of(n) for n in report.not_run}


def test_a_cell_on_another_backend_says_which_label_to_offer() -> None:
    waiting = "no alive sm_90 runner offers cudnn=9.28.1"
    job = JobReport(
        kind=JobKind.gpu,
        family="sm_90",
        cell="sm_90-cudnn9.28.1",
        status=JobState.queued,
        waiting=waiting,
    )
    line = state_line(_report(job), "http://h:9")
    assert f"sm_90 job: waiting: {waiting}" in line, line
    command = "on a host with an sm_90 GPU: FE_CI_URL=http://h:9 FE_CI_RUNNER_LABELS=cudnn=9.28.1"
    assert f"start a runner: {command} fe-ci runner " in line, line
    # the host's backend needs no label: the runner's GPU says its family
    job.cell = "sm_90"
    assert "FE_CI_RUNNER_LABELS" not in state_line(_report(job), "http://h:9")
