"""bench/gpu_surface.py's parts that need no GPU: the torch flag put back around every run (also
when the run raises), the byte comparison of arms, refusals recorded, the argument checks, and
the document it writes where no CUDA device is present."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import gpu_surface
from bench.gpu_surface_kit import (
    Deadline,
    attention_reference,
    expect_raise,
    measure_arm,
    record,
    torch_flag,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_cuda_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    # measure_arm waits for the GPU after each run; on this CPU-only torch that call would raise
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)


@pytest.mark.parametrize("mode", ["off", "on", "warn_only"])
def test_a_failing_run_leaves_the_flag_as_it_was(mode: str) -> None:
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    seen = []

    def run() -> dict[str, torch.Tensor]:
        seen.append(
            (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            )
        )
        raise RuntimeError("the entry point failed")

    with pytest.raises(RuntimeError):
        measure_arm(run, 4, Deadline(30), flag=mode)
    assert seen == [(mode != "off", mode == "warn_only")]
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    ) == before


def test_the_flag_is_put_back_when_it_was_on_before() -> None:
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with torch_flag("off"):
            assert not torch.are_deterministic_algorithms_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    with pytest.raises(ValueError), torch_flag("sometimes"):
        pass


def test_runs_are_compared_with_run_0_by_bytes() -> None:
    counter = itertools.count()

    def run() -> dict[str, torch.Tensor]:
        i = next(counter)
        # run 2 and 5 change one element by one bf16 ulp of 2.0; "same" never changes
        bump = 0.015625 if i in (2, 5) else 0.0
        return {"d": torch.tensor([1.0, 2.0 + bump], dtype=torch.bfloat16), "same": torch.ones(3)}

    rec, first = measure_arm(run, 8, Deadline(30))
    assert rec["runs"] == 8 and rec["runs_differing"] == 2
    assert rec["outputs"]["d"]["runs_differing"] == 2
    assert rec["outputs"]["d"]["max_abs_diff"] == pytest.approx(0.015625)
    assert rec["outputs"]["same"] == {"runs_differing": 0, "max_abs_diff": 0.0, "nan": False}
    assert torch.equal(first["d"], torch.tensor([1.0, 2.0], dtype=torch.bfloat16))


def test_negative_zero_differs_by_bytes_not_by_value() -> None:
    values = iter([torch.tensor([0.0]), torch.tensor([-0.0])])
    rec, _ = measure_arm(lambda: {"x": next(values)}, 2, Deadline(30))
    assert rec["runs_differing"] == 1 and rec["outputs"]["x"]["max_abs_diff"] == 0.0


def test_refusals_and_failures_are_recorded_with_their_type() -> None:
    def refuse() -> None:
        raise ValueError("deterministic backward requires SM100")

    assert expect_raise(refuse, ValueError)["as_expected"] is True
    ran = expect_raise(lambda: None, ValueError)
    assert ran["ran"] is True and ran["as_expected"] is False
    results: list[dict[str, object]] = []
    rec = record(results, "ep", "cfg", "arm", lambda: {"x": 1 / 0})
    assert rec["error"] == {"type": "ZeroDivisionError", "message": "division by zero"}
    assert results == [rec]


def test_the_gqa_reference_matches_autograd() -> None:
    gen = torch.Generator().manual_seed(7)
    q, d_o = (torch.randn(1, 4, 16, 8, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(2))
    ref = attention_reference(q, k, v, d_o, causal=True, scale=0.3)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(2, dim=1) for t in leaves[1:])
    s = (0.3 * leaves[0] @ kk.transpose(-1, -2)).masked_fill(
        torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf")
    )
    (torch.softmax(s, -1) @ vv).backward(d_o)
    for name, leaf in zip(("dq", "dk", "dv"), leaves, strict=True):
        assert leaf.grad is not None
        torch.testing.assert_close(ref[name], leaf.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "argv", [["--sections", "nope"], ["--sections", ""], ["--runs", "1"], ["--budget-s", "0"]]
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        gpu_surface.parse(argv)
    assert exc.value.code == 2


def test_without_cuda_it_writes_a_document_saying_so(tmp_path: Path) -> None:
    out = tmp_path / "surface.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_surface.py"),
            "--sections",
            "sdpa_torch,flex",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    doc = json.loads(out.read_text())
    assert doc == json.loads(proc.stdout)
    assert doc["skipped"] == "no CUDA device" and doc["results"] == []
    assert doc["environment"]["cuda_available"] is False
