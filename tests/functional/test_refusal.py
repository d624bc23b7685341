"""The refusal stage on real registry wheels, run as a subprocess of each candidate environment.

The grouped-GEMM kernels need an sm_100 GPU, which is not here: the stage intercepts the wrapper
call (keeping the real signature and docstring for feature detection) and observes the decision
and the keyword arguments. Everything else - the wheels, the import of ``cudnn``, the consumer,
the torch flag - is real.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from core.wire import RefusalRow, Stage, StageResult, Status
from runner.inside import documents, refusal_rows, te_gate
from testkit.registry import candidate_env

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("1.27.0", "1.28.0", "1.32.0")
KNOB = "deterministic"

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NVTE_ALLOW_NONDETERMINISTIC_ALGO"}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _python(version: str, code: str) -> str:
    proc = subprocess.run(
        [str(candidate_env(version).python), "-c", textwrap.dedent(code)],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@functools.cache
def stage(version: str, family: str | None = None) -> dict[str, Any]:
    """The stage's document for one registry release, run the way the runner runs it."""
    python = str(candidate_env(version).python)
    with tempfile.TemporaryDirectory(prefix="fe-ci-refusal-") as work:
        params, out = Path(work) / "params.json", Path(work) / "result.json"
        params.write_text(json.dumps({"family": family}))
        proc = subprocess.run(
            [python, "-m", "runner.inside.refusal", "--in", str(params), "--out", str(out)],
            env=_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["status"] != "error", doc.get("log_tail")
    assert documents.problems("refusal", doc) == []  # the contract the runner reads it by
    return doc


@functools.cache
def in_one_process() -> dict[str, Any]:
    """Two calls of ``refusal.run`` in one 1.32.0 interpreter (one start of torch and the DSL, not
    two): first with a determinism hook, from the process's own state (neither the flag nor the
    variable set, so a row's request can only be the stage's); then from a caller that set both,
    whose state must be as it was afterwards."""
    out = _python(
        "1.32.0",
        """
        import json, os, torch
        from runner.inside import consumer, refusal
        assert "NVTE_ALLOW_NONDETERMINISTIC_ALGO" not in os.environ
        assert not torch.are_deterministic_algorithms_enabled()
        seen = []
        def harness(step):
            seen.append([step.activation, step.fc1_bias, consumer.determinism_requested()])
            return {"status": "fail" if step.activation == "swiglu" else "pass", "detail": "x"}
        doc = refusal.run({}, determinism=harness)
        det = [r for r in doc["refusal"] if r["observed"] == "deterministic"]
        hook = {"seen": seen, "status": doc["status"],
                "row_status": sorted({(r["activation"], r["status"]) for r in det})}
        os.environ["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] = "1"
        torch.use_deterministic_algorithms(True, warn_only=False)
        doc = refusal.run({})
        restored = {
            "status": doc["status"],
            "env": os.environ.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO"),
            "flag": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        }
        print(json.dumps({"hook": hook, "restored": restored}))
        """,
    )
    got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return got


def rows(version: str, **match: Any) -> list[dict[str, Any]]:
    found = [r for r in stage(version)["refusal"] if all(r[k] == v for k, v in match.items())]
    assert found, match
    return found


def requested(r: dict[str, Any]) -> bool:
    return r["request"] != "none"


# ---------------------------------------------------------------- the shape of the result


@pytest.mark.parametrize("version", VERSIONS)
def test_every_row_of_the_grid_is_reported_in_the_wire_shape(version: str) -> None:
    doc = stage(version)
    result = StageResult.model_validate({**doc, "name": Stage.refusal})
    keys = {
        (r.activation, r.request, r.scale_bias, r.fc1_bias, r.unit_scale) for r in result.refusal
    }
    assert len(result.refusal) == len(keys) == 80
    assert {k[1] for k in keys} == {"none", "env", "torch_flag", "both", "env_allow+torch_flag"}
    assert all(isinstance(r, RefusalRow) for r in result.refusal)
    assert result.status == Status.pass_, result.reason
    by_name = {c.name: c for c in result.checks}
    for subject in ("grouped_gemm_dsrelu", "grouped_gemm_dglu"):
        check = by_name[f"{subject}.refusal"]
        assert check.status == Status.pass_ and check.metrics["rows"] == 40


# ---------------------------------------------------------------- per release


def test_1_27_refuses_every_requested_row_with_a_non_unit_scale() -> None:
    for r in rows("1.27.0", unit_scale=False):
        if requested(r):
            assert (r["expected"], r["observed"]) == ("refuse", "refuse"), r
            assert "nvidia-cudnn-frontend" in r["detail"]
    swiglu = rows("1.27.0", activation="swiglu", unit_scale=False, request="env")
    assert all("activation to srelu" in r["detail"] for r in swiglu)


def test_1_28_srelu_runs_with_the_knob_and_swiglu_refuses() -> None:
    for r in rows("1.28.0", activation="srelu", scale_bias=False, unit_scale=False):
        if requested(r):
            assert r["observed"] == "deterministic" and r["kwargs"][KNOB] is True, r
    for r in rows("1.28.0", activation="swiglu", unit_scale=False):
        if requested(r):
            assert r["observed"] == "refuse", r
            assert "activation to srelu" in r["detail"]


def test_1_32_knob_for_srelu_and_for_swiglu_without_fc1_bias() -> None:
    for r in rows("1.32.0", scale_bias=False, unit_scale=False):
        if not requested(r):
            continue
        if r["activation"] == "swiglu" and r["fc1_bias"]:
            assert r["observed"] == "refuse", r
            assert "drop the FC1 bias" in r["detail"] and "does not cover dbias" in r["detail"]
        else:
            assert r["observed"] == "deterministic" and r["kwargs"][KNOB] is True, r


def test_dbias_coverage_is_read_from_the_real_wrappers() -> None:
    knobs = stage("1.32.0")["knobs"]
    assert knobs["grouped_gemm_dsrelu"]["covers_dbias"] == "covered"
    assert knobs["grouped_gemm_dglu"]["covers_dbias"] == "not_covered"
    assert stage("1.28.0")["knobs"]["grouped_gemm_dglu"]["present"] is False
    assert stage("1.27.0")["knobs"]["grouped_gemm_dsrelu"]["present"] is False


# ---------------------------------------------------------------- on every release


@pytest.mark.parametrize("version", VERSIONS)
def test_scale_bias_with_a_non_unit_scale_refuses_when_requested(version: str) -> None:
    for r in rows(version, scale_bias=True, unit_scale=False):
        if requested(r):
            assert r["observed"] == "refuse" and "drop the FC2 scale bias" in r["detail"], r


@pytest.mark.parametrize("version", VERSIONS)
def test_unit_scale_never_refuses_and_never_passes_the_knob(version: str) -> None:
    for r in rows(version, unit_scale=True):
        assert r["observed"] == "default" and KNOB not in r["kwargs"], r
        assert r["kwargs"]["prob_tensor"] is None and r["kwargs"]["dprob_tensor"] is None


@pytest.mark.parametrize("version", VERSIONS)
def test_no_request_never_touches_the_knob(version: str) -> None:
    for r in rows(version, request="none"):
        assert r["observed"] == "default" and KNOB not in r["kwargs"], r


@pytest.mark.parametrize("version", VERSIONS)
def test_no_row_passes_false(version: str) -> None:
    for r in stage(version)["refusal"]:
        assert r["observed"] != "passed_false" and r["kwargs"].get(KNOB) is not False, r


@pytest.mark.parametrize("version", VERSIONS)
def test_each_row_sets_the_request_it_names_with_warn_only(version: str) -> None:
    want = {
        "none": (None, False),
        "env": ("0", False),
        "torch_flag": (None, True),
        "both": ("0", True),
        "env_allow+torch_flag": ("1", True),
    }
    for r in stage(version)["refusal"]:
        state = r["state"]
        assert (state["env"], state["torch_deterministic"]) == want[r["request"]], r
        assert state["warn_only"] is state["torch_deterministic"], r


def test_the_callers_flag_and_variable_are_restored() -> None:
    got = in_one_process()["restored"]
    assert got == {"status": "pass", "env": "1", "flag": True, "warn_only": False}


# ---------------------------------------------------------------- hooks and TransformerEngine


def test_sm_100_without_the_harness_says_the_deterministic_rows_were_not_run() -> None:
    doc = stage("1.32.0", family="sm_100")
    check = {c["name"]: c for c in doc["checks"]}["refusal.determinism_harness"]
    assert check["status"] == "skipped" and "interception" in check["detail"]
    assert "refusal.determinism_harness" not in {c["name"] for c in stage("1.32.0")["checks"]}


def test_the_determinism_hook_gets_the_deterministic_rows_under_their_request() -> None:
    got = in_one_process()["hook"]
    assert len(got["seen"]) == 12  # 8 srelu + 4 swiglu deterministic rows on 1.32.0
    assert all(requested_then for _, _, requested_then in got["seen"])
    assert got["status"] == "fail"
    assert got["row_status"] == [["srelu", "pass"], ["swiglu", "fail"]]


def test_without_transformer_engine_there_is_no_gate_and_no_gap() -> None:
    doc = stage("1.32.0")
    check = {c["name"]: c for c in doc["checks"]}["refusal.te_gate"]
    assert check["status"] == "not_applicable" and "TransformerEngine" in check["detail"]
    assert not [f for f in doc["findings"] if f["kind"] == "consumer_gap"]
    assert all("te" not in r for r in doc["refusal"])


def test_a_gate_that_refuses_an_offered_knob_is_a_consumer_gap() -> None:
    """TE's gate composition and the gap report, on the predicates TE exposes (TE is not here)."""
    glu_never = te_gate.TEGate(
        requested=lambda: True, capable={"srelu": lambda: True, "swiglu": lambda: False}
    )
    row = refusal_rows.Row("swiglu", "env", scale_bias=False, fc1_bias=False, unit_scale=False)
    assert glu_never.decide(row) == "refuse"
    unit = refusal_rows.Row("swiglu", "env", scale_bias=True, fc1_bias=False, unit_scale=True)
    assert glu_never.decide(unit) == "default"
    record = {**row.__dict__, "expected": "deterministic", "te": "refuse"}
    same = {**row.__dict__, "fc1_bias": True, "expected": "refuse", "te": "refuse"}
    (gap,) = te_gate.consumer_gaps([record, same])
    assert (gap["kind"], gap["severity"], gap["subject"]) == (
        "consumer_gap",
        "warning",
        "grouped_gemm_dglu",
    )
    assert "offers the knob" in gap["message"] and "swiglu" in gap["message"]
