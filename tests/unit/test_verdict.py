"""The verdict rule: one test per row of docs/architecture.md's table, and the order of rows."""

from __future__ import annotations

from core import verdict
from core.verdict import EXIT_CODES, judge, uncovered_subjects
from core.wire import (
    BuildReport,
    BuildStatus,
    Capability,
    Check,
    Finding,
    JobKind,
    JobOutcome,
    JobReport,
    JobState,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)


def cap(present: bool = True, importable: bool = True) -> Capability:
    return Capability(importable=importable, knob="deterministic", present=present)


def stage(
    name: Stage, status: Status = Status.pass_, checks: list[Check] | None = None
) -> StageResult:
    return StageResult(name=name, status=status, reason=f"{name} {status}", checks=checks or [])


def det(subject: str, status: Status, detail: str = "") -> StageResult:
    return stage(
        Stage.determinism,
        Status.pass_,
        [Check(name=f"{subject}.deterministic", status=status, detail=detail)],
    )


def job(
    *stages: StageResult,
    kind: JobKind = JobKind.gpu,
    family: str | None = "sm_90",
    state: JobState = JobState.finished,
    reason: str = "",
    outcome: JobOutcome | None = None,
) -> JobReport:
    if outcome is None and state == JobState.finished:
        outcome = JobOutcome.ran
    return JobReport(
        kind=kind, family=family, status=state, stages=list(stages), reason=reason, outcome=outcome
    )


def report(
    *jobs: JobReport,
    caps: dict[str, Capability] | None = None,
    findings: list[Finding] | None = None,
    status: BuildStatus = BuildStatus.finished,
) -> BuildReport:
    return BuildReport(
        source="wheel",
        status=status,
        verdict=Verdict.pending,
        capabilities=caps if caps is not None else {"sdpa_bwd": cap()},
        findings=findings or [],
        jobs=list(jobs),
    )


GOOD = (stage(Stage.install), stage(Stage.probe), det("sdpa_bwd", Status.pass_))


def test_pending_while_a_job_is_waiting_queued_or_leased() -> None:
    for state in (JobState.waiting, JobState.queued, JobState.leased):
        r = report(
            job(*GOOD), job(kind=JobKind.cpu, family=None, state=state), status=BuildStatus.running
        )
        assert judge(r).verdict == Verdict.pending


def test_cancelled() -> None:
    r = report(job(*GOOD, state=JobState.cancelled), status=BuildStatus.cancelled)
    assert judge(r).verdict == Verdict.cancelled


def test_cancelled_beats_a_job_still_leased() -> None:
    r = report(job(state=JobState.leased), status=BuildStatus.cancelled)
    assert judge(r).verdict == Verdict.cancelled


def test_fail_on_a_failed_check() -> None:
    r = report(
        job(stage(Stage.install), stage(Stage.probe), det("sdpa_bwd", Status.fail, "3 of 8 differ"))
    )
    j = judge(r)
    assert j.verdict == Verdict.fail
    assert "sdpa_bwd.deterministic" in j.reason


def test_fail_on_an_error_finding_even_if_every_check_passed() -> None:
    f = Finding(kind="version_feature_mismatch", severity=Severity.error, message="claims 1.28.0")
    assert judge(report(job(*GOOD), findings=[f])).verdict == Verdict.fail


def test_warning_finding_does_not_fail() -> None:
    f = Finding(kind="feature_predates_version", severity=Severity.warning, message="w")
    assert judge(report(job(*GOOD), findings=[f])).verdict == Verdict.pass_


def test_fail_beats_error() -> None:
    r = report(
        job(stage(Stage.install), stage(Stage.probe, Status.crashed), det("sdpa_bwd", Status.fail))
    )
    assert judge(r).verdict == Verdict.fail


def test_error_on_error_timeout_or_crashed_stage() -> None:
    for status in (Status.error, Status.timeout, Status.crashed):
        r = report(
            job(stage(Stage.install), stage(Stage.probe, status), det("sdpa_bwd", Status.pass_))
        )
        assert judge(r).verdict == Verdict.error, status


def test_error_on_a_job_that_ended_in_error_after_its_retries() -> None:
    r = report(
        job(*GOOD),
        job(
            kind=JobKind.cpu,
            family=None,
            reason="error: the lease expired 3 times",
            outcome=JobOutcome.error,
        ),
    )
    assert judge(r).verdict == Verdict.error


def test_error_beats_inconclusive() -> None:
    r = report(
        job(
            stage(Stage.install, Status.timeout),
            stage(Stage.probe),
            det("sdpa_bwd", Status.inconclusive),
        )
    )
    assert judge(r).verdict == Verdict.error


def test_inconclusive_when_a_determinism_check_certified_nothing() -> None:
    r = report(
        job(
            stage(Stage.install),
            stage(Stage.probe),
            det("sdpa_bwd", Status.inconclusive, "control never varied"),
        )
    )
    j = judge(r)
    assert j.verdict == Verdict.inconclusive
    assert "control never varied" in j.reason


def test_inconclusive_beats_incomplete() -> None:
    r = report(
        job(
            stage(Stage.install),
            stage(Stage.probe),
            det("sdpa_bwd", Status.inconclusive),
            stage(Stage.refusal, Status.skipped),
        ),
    )
    assert judge(r).verdict == Verdict.inconclusive


def test_incomplete_when_a_stage_was_skipped() -> None:
    r = report(job(*GOOD, stage(Stage.refusal, Status.skipped)))
    assert judge(r).verdict == Verdict.incomplete


def test_incomplete_when_a_gpu_job_ended_without_a_runner() -> None:
    r = report(
        job(*GOOD),
        job(family="sm_100", reason="skipped: no sm_100 runner", outcome=JobOutcome.skipped),
    )
    assert judge(r).verdict == Verdict.incomplete


def test_cpu_only_run_is_incomplete_because_no_job_covered_the_subjects() -> None:
    caps = {"sdpa_bwd": cap(), "grouped_gemm_dsrelu": cap()}
    r = report(
        job(stage(Stage.install), stage(Stage.probe), kind=JobKind.cpu, family=None), caps=caps
    )
    j = judge(r)
    assert j.verdict == Verdict.incomplete
    assert set(uncovered_subjects(r)) == {"sdpa_bwd", "grouped_gemm_dsrelu"}
    assert "no sm_100 runner" in uncovered_subjects(r)["grouped_gemm_dsrelu"]


def test_every_subject_that_did_not_run_is_named_with_its_reason() -> None:
    caps = {
        "sdpa_bwd": cap(),
        "grouped_gemm_dsrelu": cap(),
        "grouped_gemm_dglu": cap(),
        "flex_attention_bwd": cap(present=False),
    }
    sm90 = job(*GOOD[:2], det("sdpa_bwd", Status.pass_))
    sm100 = job(family="sm_100", reason="skipped: no sm_100 runner", outcome=JobOutcome.skipped)
    j = judge(report(sm90, sm100, caps=caps))
    assert j.verdict == Verdict.incomplete
    assert [(n.subject, n.status, n.reason) for n in j.not_run] == [
        ("grouped_gemm_dglu", Status.skipped, "skipped: no sm_100 runner"),
        ("grouped_gemm_dsrelu", Status.skipped, "skipped: no sm_100 runner"),
        ("flex_attention_bwd", Status.not_applicable, "this build has no 'deterministic'"),
    ]
    # skipped and not applicable alike, in the words every reader shows (core/notrun.py)
    assert j.reason == (
        "3 subjects did not run: grouped_gemm_dglu, grouped_gemm_dsrelu: skipped: no sm_100 "
        "runner; flex_attention_bwd: not applicable: this build has no 'deterministic'"
    )
    # while a job is still to run, nothing is called skipped yet
    queued = job(family="sm_100", state=JobState.queued)
    assert [n.status for n in judge(report(sm90, queued, caps=caps)).not_run] == [
        Status.not_applicable
    ]


def test_subject_skipped_on_one_job_but_run_on_another_counts_as_covered() -> None:
    caps = {"grouped_gemm_dsrelu": cap()}
    sm90 = job(*GOOD[:2], det("grouped_gemm_dsrelu", Status.skipped, "needs sm_100"))
    sm100 = job(*GOOD[:2], det("grouped_gemm_dsrelu", Status.pass_), family="sm_100")
    assert judge(report(sm90, sm100, caps=caps)).verdict == Verdict.pass_
    assert judge(report(sm90, caps=caps)).verdict == Verdict.incomplete


def test_a_subject_whose_check_crashed_ran_and_is_not_called_skipped() -> None:
    """A crashed check ran (and errs the build); it is no subject that no runner took."""
    caps = {"sdpa_bwd": cap()}
    crashed = job(*GOOD[:2], det("sdpa_bwd", Status.crashed, "died by signal SIGSEGV"))
    r = report(crashed, caps=caps)
    assert uncovered_subjects(r) == {}
    assert [n.subject for n in judge(r).not_run] == []


def test_not_applicable_never_lowers_the_verdict() -> None:
    caps = {"sdpa_bwd": cap(), "flex_attention_bwd": cap(present=False, importable=False)}
    r = report(
        job(
            stage(Stage.install, Status.not_applicable),
            stage(Stage.probe),
            det("sdpa_bwd", Status.pass_),
        ),
        caps=caps,
    )
    assert judge(r).verdict == Verdict.pass_


def test_pass_when_everything_applicable_ran_and_passed() -> None:
    j = judge(report(job(*GOOD)))
    assert j.verdict == Verdict.pass_


def test_no_stage_at_all_is_not_a_pass() -> None:
    assert judge(report(job(), caps={})).verdict == Verdict.incomplete


def test_exit_codes() -> None:
    assert EXIT_CODES[Verdict.pass_] == 0
    assert EXIT_CODES[Verdict.fail] == EXIT_CODES[Verdict.error] == 1
    assert EXIT_CODES[Verdict.inconclusive] == EXIT_CODES[Verdict.incomplete] == 2


def test_the_status_sets_partition_every_status_and_the_order_ranks_each_once() -> None:
    """A status added to the wire must find its place in each set the grid, the JUnit XML, the
    gate and the statuses read (core/verdict.py), or this fails."""
    every = set(Status)
    assert every == verdict.RAN | verdict.NOT_RUN and not verdict.RAN & verdict.NOT_RUN
    assert verdict.ANSWERED | verdict.ERRORED == verdict.RAN
    assert not verdict.ANSWERED & verdict.ERRORED
    assert verdict.NOT_PASSED | {Status.pass_} == verdict.RAN
    assert every - verdict.NOT_PASSED - verdict.NO_ANSWER == verdict.ENDED_WELL
    assert sorted(verdict.WORST_FIRST) == sorted(every)
    assert verdict.OPEN_JOBS | {JobState.finished, JobState.cancelled} == set(JobState)
