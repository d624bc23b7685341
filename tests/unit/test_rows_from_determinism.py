"""The refusal stage's result from the frontend rows the determinism stage's process ran
(``runner.pipeline.stage_results.rows_from_determinism``): the candidate's output, checked as the
refusal stage's own document is; a failed row fails the stage; without the rows, the stage runs
on its own."""

from __future__ import annotations

from typing import Any

import pytest

from core.frontend_refusals import REUSED_CHECK
from core.wire import Stage, Status
from runner.inside import determinism, documents, refusal
from runner.pipeline.stage_results import rows_from_determinism

ROW = "frontend_refusal.dsa_sparse_attention_bwd.deterministic"


def _rows(status: str, **extra: Any) -> dict[str, Any]:
    """A refusal document as ``refusal.frontend_only`` writes it, made in the determinism
    stage's process."""
    return {
        "status": status,
        "reason": "frontend refusal rows only (1 fail); the consumer's rows are reused",
        "checks": [
            {"name": ROW, "status": status, "detail": "ran: the frontend owed ValueError"},
            {"name": REUSED_CHECK, "status": "not_applicable", "detail": "not run here"},
        ],
        "findings": [],
        "refusal": [],
        "knobs": {},
        "timings": {"stage": {"rows_s": 0.25, "in_determinism_process": True}},
        **extra,
    }


def _doc(rows: Any) -> dict[str, Any]:
    return {"status": "skipped", "reason": "no CUDA GPU on this host", "frontend_refusal": rows}


def test_the_rows_become_the_refusal_stage_and_a_failed_row_fails_it() -> None:
    result = rows_from_determinism(_doc(_rows("fail")))
    assert result is not None
    assert result.name == Stage.refusal and result.status == Status.fail
    assert [c.name for c in result.checks] == [ROW, REUSED_CHECK]
    assert result.duration_s == 0.25  # the rows' own seconds, not the determinism stage's
    assert result.timings["stage"]["in_determinism_process"] is True


def test_without_the_rows_the_refusal_stage_runs_on_its_own() -> None:
    assert rows_from_determinism({}) is None
    assert rows_from_determinism(_doc(None)) is None
    assert rows_from_determinism(_doc(["not", "a", "document"])) is None


def test_rows_the_runner_does_not_accept_are_the_stages_error() -> None:
    unknown = rows_from_determinism(_doc(_rows("pass", extra_key=1)))
    assert unknown is not None and unknown.status == Status.error
    assert "unknown keys ['extra_key']" in unknown.reason and unknown.duration_s == 0.0
    bad_status = rows_from_determinism(_doc(_rows("great")))
    assert bad_status is not None and bad_status.status == Status.error
    assert "does not accept" in bad_status.reason
    hostile_seconds = rows_from_determinism(
        _doc(_rows("pass", timings={"stage": {"rows_s": "soon"}}))
    )
    assert hostile_seconds is not None and hostile_seconds.status == Status.error


def test_an_error_of_the_rows_is_the_refusal_stages_error() -> None:
    failed = {"status": "error", "reason": "the frontend refusal rows: RuntimeError: boom",
              "log_tail": "Traceback", "timings": {"stage": {"rows_s": 0.1}}}  # fmt: skip
    result = rows_from_determinism(_doc(failed))
    assert result is not None and result.status == Status.error
    assert "RuntimeError: boom" in result.reason and result.log_tail == "Traceback"


def test_the_determinism_stage_makes_the_rows_only_when_asked_and_says_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``determinism._frontend_rows`` in this interpreter (no frontend, no GPU); the exception is
    raised in place of the candidate's, which a real build here cannot be made to raise."""
    assert determinism._frontend_rows({}) is None
    made = determinism._frontend_rows({"frontend_refusal": {"family": "sm_90"}})
    assert made is not None and documents.problems("refusal", made) == []
    assert made["timings"]["stage"]["in_determinism_process"] is True
    assert [c["name"] for c in made["checks"]][-1] == REUSED_CHECK

    def boom(params: Any) -> Any:
        raise RuntimeError("the candidate broke")

    monkeypatch.setattr(refusal, "frontend_only", boom)
    failed = determinism._frontend_rows({"frontend_refusal": {"family": "sm_90"}})
    assert failed is not None and documents.problems("refusal", failed) == []
    result = rows_from_determinism(_doc(failed))
    assert result is not None and result.status == Status.error
    assert "RuntimeError: the candidate broke" in result.reason
