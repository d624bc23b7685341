"""What GitHub is told, as pure functions over build reports: the gate's ``fe-ci`` context, an
``incomplete`` that is never a success, and descriptions cut on a word boundary.

GitHub itself cannot be reached here; ``tests/functional/test_github_checks.py`` sends these
through a recorder of its API. Here: the words and states alone.
"""

from __future__ import annotations

from core import gate
from core.text import ELLIPSIS, shorten
from core.wire import BuildReport, Status, Verdict
from service.outbound.statuses import BUILD_CONTEXT, DESCRIPTION_CHARS, build_statuses, description
from tests.reports import cpu_job, h200_build, sm90_job


def _commit(report: BuildReport, require: str = "all") -> dict[str, object]:
    report.id, report.commit, report.source = 7, "a" * 40, "commit"
    report.gate = gate.decide(report, gate.parse_require(require))
    return {s.context: s for s in build_statuses(report, "https://ci.example.org")}


def test_shorten_cuts_on_a_word_boundary_with_an_ellipsis() -> None:
    text = "incomplete: 2 subjects did not run: grouped_gemm_dglu, grouped_gemm_dsrelu: skipped"
    assert shorten(text, 200) == text
    cut = shorten(text, 50)
    assert len(cut) <= 50 and cut.endswith(ELLIPSIS)
    assert text.startswith(cut.removesuffix(ELLIPSIS))
    assert text[len(cut) - 1] in " ,:"  # the next character was a break: no half a word
    assert shorten("one\nline   only", 40) == "one line only"
    assert shorten("x" * 300, 10) == "x" * 9 + ELLIPSIS  # one long word is cut inside it


def test_descriptions_stay_within_githubs_limit_and_end_on_a_whole_word() -> None:
    reason = "sdpa_bwd.deterministic: " + "dq differed from run 0 in 3 of 23 runs; " * 8
    text = description(Verdict.fail, reason)
    assert len(text) <= DESCRIPTION_CHARS and text.endswith(ELLIPSIS)
    whole = f"fail: {' '.join(reason.split())}"
    assert whole.startswith(text.removesuffix(ELLIPSIS))
    assert whole[len(text) - 1] == " "


def test_incomplete_is_never_a_success() -> None:
    statuses = _commit(h200_build())
    summary = statuses[BUILD_CONTEXT]
    assert summary.state == "error" and summary.conclusion == "neutral"
    assert "grouped_gemm_dglu" in summary.description  # it says what did not run
    assert len(summary.description) <= DESCRIPTION_CHARS
    assert {s.state for s in statuses.values()} <= {"success", "error"}
    assert statuses["fe-ci/sm_90"].state == "success"  # the jobs that ran say so
    assert statuses["fe-ci/probe"].state == "success"


def test_the_fe_ci_context_follows_the_gate_and_keeps_the_verdict_in_words() -> None:
    summary = _commit(h200_build(), "probe,refusal,sm_90")[BUILD_CONTEXT]
    assert summary.state == "success" and summary.conclusion == "success"
    assert summary.description.startswith("required checks (probe,refusal,sm_90) passed;")
    assert "incomplete" in summary.description
    assert "Gate (probe, refusal, sm_90): **success**" in summary.summary
    failed = _commit(h200_build(cpu_job(), sm90_job(Status.fail, "dq differed")), "sm_90")
    assert failed[BUILD_CONTEXT].state == "failure"
    assert failed[BUILD_CONTEXT].conclusion == "failure"
    assert "sdpa_bwd.deterministic" in failed[BUILD_CONTEXT].description
    assert "### Causes" in failed[BUILD_CONTEXT].summary
    neutral = _commit(h200_build(), "sm_100")[BUILD_CONTEXT]
    assert neutral.state == "error" and neutral.conclusion == "neutral"
    assert "no sm_100 job" in neutral.description
