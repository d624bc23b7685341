"""The bisection search (``core.bisection``) and the transition rules (``core.transitions``),
pure: no git, no service. Commits are named c1..cN; GOOD is c0 (not in the list)."""

from __future__ import annotations

import pytest

from core import transitions
from core.bisection import Answer, Mark, Outcome, Search, SearchError, search
from core.wire import (
    BuildReport,
    BuildStatus,
    Check,
    Finding,
    JobKind,
    JobReport,
    JobState,
    RefusalReport,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)

COMMITS = tuple(f"c{i}" for i in range(2, 11))  # GOOD = c1; c2..c10, BAD = c10


def run(
    commits: tuple[str, ...],
    first_bad: str,
    unbuildable: frozenset[str] = frozenset(),
    cap: int = 64,
) -> tuple[Search, Answer]:
    """Drive the search as a caller would: test what it asks for, until it answers."""
    s = search(commits)
    bad_from = commits.index(first_bad)
    while (answer := s.done(cap)) is None:
        c = s.next_commit()
        assert c is not None
        mark = (
            Mark.skip
            if c in unbuildable
            else (Mark.bad if commits.index(c) >= bad_from else Mark.good)
        )
        s = s.record(c, mark)
    return s, answer


def test_first_pick_is_the_middle_and_the_answer_is_found_in_log2_steps() -> None:
    s = search(COMMITS)
    assert s.next_commit() == "c6"  # 8 untested between GOOD and BAD: the middle one
    for first_bad in COMMITS:
        steps, answer = run(COMMITS, first_bad)
        assert answer.outcome == Outcome.found and answer.first_bad == first_bad
        assert len(steps.steps) <= 4, (first_bad, steps.steps)


def test_knob_removed_at_six_takes_three_builds() -> None:
    steps, answer = run(COMMITS, "c6")
    assert [st.commit for st in steps.steps] == ["c6", "c4", "c5"]
    assert answer.first_bad == "c6" and "c6" in answer.describe()


def test_a_commit_that_does_not_build_is_skipped_and_the_answer_is_a_range() -> None:
    _, answer = run(COMMITS, "c6", unbuildable=frozenset({"c5"}))
    assert answer.outcome == Outcome.range
    assert answer.candidates == ("c5", "c6") and answer.skipped == ("c5",)
    assert answer.first_bad is None
    assert "one of 2 commits" in answer.describe() and "skipped" in answer.describe()


def test_a_skipped_midpoint_moves_to_its_neighbour() -> None:
    s = search(COMMITS).record("c6", Mark.skip)
    assert s.next_commit() in ("c5", "c7")
    _, answer = run(COMMITS, "c8", unbuildable=frozenset({"c6"}))
    assert answer.first_bad == "c8"  # a skip away from the answer costs a step, not the answer


def test_every_commit_unbuildable_leaves_the_whole_window() -> None:
    _, answer = run(COMMITS, "c6", unbuildable=frozenset(COMMITS[:-1]))
    assert answer.outcome == Outcome.range and answer.candidates == COMMITS


def test_the_cap_stops_the_search_with_the_window_left() -> None:
    steps, answer = run(COMMITS, "c6", cap=1)
    assert len(steps.steps) == 1
    assert answer.outcome == Outcome.capped and answer.candidates == ("c2", "c3", "c4", "c5", "c6")
    assert "cap" in answer.describe()


def test_adjacent_good_and_bad_need_no_build() -> None:
    s = search(("c2",))
    assert s.next_commit() is None and s.done(8) is not None
    assert s.answer().first_bad == "c2"


def test_bad_input_is_refused() -> None:
    with pytest.raises(SearchError):
        search(())
    with pytest.raises(SearchError):
        search(("a", "a"))
    with pytest.raises(SearchError):
        Search(("a", "b")).record("zzz", Mark.bad)


# ------------------------------------------------------------------ the transition rules


def report(
    *,
    findings: list[Finding] = (),  # type: ignore[assignment]
    probe: Status = Status.pass_,
    det: dict[str, Status] | None = None,
    refusal: dict[str, str] | None = None,
) -> BuildReport:
    jobs = [
        JobReport(
            kind=JobKind.cpu,
            status=JobState.finished,
            stages=[
                StageResult(name=Stage.probe, status=probe),
                StageResult(name=Stage.refusal, status=Status.pass_ if refusal else Status.skipped),
            ],
        )
    ]
    if det is not None:
        checks = [Check(name=n, status=s) for n, s in det.items()]
        jobs.append(
            JobReport(
                kind=JobKind.gpu,
                family="sm_90",
                status=JobState.finished,
                stages=[StageResult(name=Stage.determinism, status=Status.pass_, checks=checks)],
            )
        )
    rows = [
        RefusalReport(
            activation="srelu",
            request=req,
            scale_bias=False,
            fc1_bias=False,
            unit_scale=False,
            expected="deterministic",
            observed=obs,
            status=Status.pass_ if obs == "deterministic" else Status.fail,
        )
        for req, obs in (refusal or {}).items()
    ]
    return BuildReport(
        source="commit",
        status=BuildStatus.finished,
        verdict=Verdict.fail,
        findings=list(findings),
        jobs=jobs,
        refusal=rows,
    )


REGRESSION = Finding(
    kind="feature_regression", severity=Severity.error, subject="grouped_gemm_dsrelu", message="x"
)


def test_feature_regression_asks_the_probe_and_judges_by_the_finding() -> None:
    (q,) = transitions.detect(report(), report(findings=[REGRESSION]))
    assert q.rule == "feature_regression" and q.subject == "grouped_gemm_dsrelu"
    assert q.stages == [Stage.install, Stage.probe] and q.family is None
    assert transitions.judge(q, report(findings=[REGRESSION])) == Mark.bad
    assert transitions.judge(q, report()) == Mark.good
    assert transitions.judge(q, report(probe=Status.error)) == Mark.skip
    assert q.repro("f" * 40) == f"fe-ci validate --commit {'f' * 40} --stages probe"


def test_a_determinism_check_from_pass_to_fail_asks_that_subject_and_family() -> None:
    good = report(det={"sdpa_bwd.deterministic": Status.pass_})
    bad = report(det={"sdpa_bwd.deterministic": Status.fail})
    (q,) = transitions.detect(good, bad)
    assert (q.subject, q.family, q.check) == ("sdpa_bwd", "sm_90", "sdpa_bwd.deterministic")
    assert Stage.determinism in q.stages
    assert transitions.judge(q, bad) == Mark.bad and transitions.judge(q, good) == Mark.good
    inconclusive = report(det={"sdpa_bwd.deterministic": Status.inconclusive})
    assert transitions.judge(q, inconclusive) == Mark.skip
    assert q.repro("a" * 40).endswith("--stages probe,determinism --subjects sdpa_bwd")


def test_a_refusal_row_that_changed_is_a_question() -> None:
    good = report(refusal={"env": "deterministic"})
    bad = report(refusal={"env": "passed_false"})
    (q,) = transitions.detect(good, bad)
    assert q.rule == "refusal_row" and q.check == "refusal:srelu/env"
    assert transitions.judge(q, bad) == Mark.bad and transitions.judge(q, good) == Mark.good


@pytest.mark.parametrize("kind", ["deterministic_bits_changed", "determinism_cost_regressed"])
def test_findings_of_the_determinism_history_are_rules_too(kind: str) -> None:
    finding = Finding(kind=kind, severity=Severity.warning, subject="sdpa_bwd", message="x")
    det = {"sdpa_bwd.deterministic": Status.pass_}
    (q,) = transitions.detect(report(det=det), report(det=det, findings=[finding]))
    assert q.rule == kind and q.family == "sm_90" and Stage.determinism in q.stages
    assert transitions.judge(q, report(det=det, findings=[finding])) == Mark.bad
    assert transitions.judge(q, report(det=det)) == Mark.good


def test_nothing_red_asks_nothing_and_cheapest_rule_comes_first() -> None:
    assert transitions.detect(report(), report()) == []
    good = report(det={"sdpa_bwd.deterministic": Status.pass_})
    bad = report(det={"sdpa_bwd.deterministic": Status.fail}, findings=[REGRESSION])
    assert [q.rule for q in transitions.detect(good, bad)] == [
        "feature_regression",
        "determinism_check",
    ]
