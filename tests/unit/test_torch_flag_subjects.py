"""The torch-flag subjects and the frontend's own refusals, on CPU: configs, the flag's arms and
its restoration, the backend a subject needs, how a refusal row is judged, and the coverage of
1.32.0's measured surface (core/surface_ledger.json) on a CPU-only run and on an sm_90 fleet."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from core import surface
from core.frontend_refusals import BY_NAME, FRONTEND_REFUSALS
from core.subjects import SUBJECTS, backend_too_old, backend_tuple
from runner.inside import frontend_refusal, plan
from runner.inside.subjects import causal_conv1d_bwd, sdpa_torch_bwd, sdpa_torch_thd_bwd
from runner.inside.torchflag import Arms, flag, state

ROOT = Path(__file__).resolve().parents[2]
KNOBS_1_32 = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]["1.32.0"][
    "knobs"
]
COMPILED = {"grouped_gemm_dsrelu", "grouped_gemm_dglu"}
STATES = [(False, False), (True, False), (True, True)]


@pytest.fixture(autouse=True)
def _flag_kept() -> Iterator[None]:
    saved = state()
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


def _tokens(params: dict) -> int:
    if params["layout"] == "thd":
        return sum(params["lens"]) * params["h"] * params["d"]
    return params["b"] * params["s"] * params["h"] * params["d"]


def test_sdpa_torch_has_a_subject_per_path_each_small_to_large() -> None:
    """Dense and packed THD are subjects of their own, with the one workload: a walk settles at
    one config, and each path must be run with the flag on (#837 dropped it on the dense one)."""
    for module, layout in ((sdpa_torch_bwd, "bhsd"), (sdpa_torch_thd_bwd, "thd")):
        configs = module.CONFIGS
        assert {c.params["layout"] for c in configs} == {layout}
        sizes = [_tokens(c.params) for c in configs]
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)
        assert [c.name for c in configs] == list(SUBJECTS[module.DECLARATION.name].config_names)
        assert module.SUBJECT.workload is sdpa_torch_bwd.SdpaTorchWorkload
    dense, packed = SUBJECTS["sdpa_torch_bwd"], SUBJECTS["sdpa_torch_thd_bwd"]
    assert dense.entry_points == packed.entry_points and dense.knob == packed.knob
    thd = sdpa_torch_thd_bwd.CONFIGS[0]
    shape, lens = sdpa_torch_bwd.shapes(thd.params)
    assert lens is not None and shape == (sum(lens), thd.params["h"], thd.params["d"])
    cu = sdpa_torch_bwd.cu_seqlens(lens, torch.device("cpu"))
    assert cu.dtype == torch.int32 and cu.tolist()[-1] == sum(lens) and cu.tolist()[0] == 0


def test_causal_conv1d_configs_grow_and_its_reference_is_the_causal_conv() -> None:
    sizes = [c.params["b"] * c.params["t"] * c.params["dim"] for c in causal_conv1d_bwd.CONFIGS]
    assert sizes == sorted(sizes)
    x, w = torch.randn(1, 2, 6, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    dy = torch.randn(1, 2, 6, dtype=torch.float64)
    got = causal_conv1d_bwd.conv_reference(x, w, dy)
    # y[t] = silu(sum_k w[k] x[t - 3 + k]): the first output sees x[0] only, through w[3]
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    pad = torch.nn.functional.pad(xs, (3, 0))
    y = torch.stack([(pad[..., t : t + 4] * ws).sum(-1) for t in range(6)], dim=-1)
    torch.nn.functional.silu(y).backward(dy)
    assert torch.allclose(got["dx"].double(), xs.grad, atol=1e-5)  # type: ignore[arg-type]
    assert torch.allclose(got["dweight"].double(), ws.grad, atol=1e-5)  # type: ignore[arg-type]


def test_the_deterministic_arm_alternates_on_and_warn_only_and_the_control_is_off() -> None:
    arms = Arms()
    seen = [arms.run(knob, state) for knob in (False, True, True, True, False, True)]
    assert arms.modes == ["off", "on", "warn_only", "on", "off", "warn_only"]
    assert seen == [(False, False), (True, False), (True, True), (True, False),
                    (False, False), (True, True)]  # fmt: skip


def test_a_deterministic_arm_the_strict_flag_cannot_reach_runs_warn_only_each_time() -> None:
    """``sdpa_provider_bwd``'s: PyTorch's SDPA rules cuDNN attention out under the strict flag,
    so its deterministic arm runs warn-only on every run, never ``on``."""
    arms = Arms(("warn_only",))
    seen = [arms.run(knob, state) for knob in (False, True, True, False, True)]
    assert arms.modes == ["off", "warn_only", "warn_only", "off", "warn_only"]
    assert seen == [(False, False), (True, True), (True, True), (False, False), (True, True)]
    for wrong in ((), ("off",), ("on", "sometimes")):
        with pytest.raises(ValueError, match="deterministic arm runs"):
            Arms(wrong)


@pytest.mark.parametrize("start", STATES)
def test_a_failing_run_leaves_the_flag_as_it_was(start: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(start[0], warn_only=start[1])
    arms = Arms()

    def fails() -> None:
        raise RuntimeError("the backward failed")

    for knob in (False, True, True):
        with pytest.raises(RuntimeError):
            arms.run(knob, fails)
        assert torch.are_deterministic_algorithms_enabled() is start[0]
        assert torch.is_deterministic_algorithms_warn_only_enabled() is start[1]
    with pytest.raises(ValueError), flag("sometimes"):
        pass


def test_a_subject_on_a_too_old_backend_is_skipped_not_covered() -> None:
    conv = SUBJECTS["causal_conv1d_bwd"]
    assert backend_tuple("91900") == (9, 19, 0) and backend_tuple("9.19.0") == (9, 19, 0)
    assert backend_tuple("garbage") is None
    assert "needs a newer cuDNN backend" in backend_too_old(conv, "9.19.0")
    assert backend_too_old(conv, "9.20.0") == "" and backend_too_old(conv, None) == ""
    assert backend_too_old(SUBJECTS["sdpa_torch_bwd"], "9.1.0") == ""
    caps = {"causal_conv1d_bwd": {"importable": True, "present": True}}
    cuda = torch.device("cuda", 0)  # never touched: status_of only reads the parameters
    status, why = plan.status_of("causal_conv1d_bwd", caps, cuda, "sm_90", None, "9.19.0")
    assert status == "skipped" and why.startswith("not covered: needs a newer cuDNN backend")
    assert plan.status_of("causal_conv1d_bwd", caps, cuda, "sm_90", None, "9.21.0") == ("", "")


def test_frontend_refusal_rows_are_data_per_release() -> None:
    assert {r.name: (r.since, r.raises or r.warns) for r in FRONTEND_REFUSALS} == {
        "dsa_sparse_attention_bwd.deterministic": ("1.29.0", "ValueError"),
        "dsa_indexer_bwd.deterministic": ("1.32.0", "ValueError"),
        "causal_conv1d_bwd.bias_flag_on": ("1.29.0", "RuntimeError"),
        "causal_conv1d_bwd.bias_flag_warn_only": ("1.29.0", "RuntimeWarning"),
    }
    for r in FRONTEND_REFUSALS:
        assert "sm_90" in r.families and r.name in frontend_refusal.CALLS


def _raises(exc: BaseException) -> frontend_refusal.Call:
    def call() -> object:
        raise exc

    return call


def test_a_refusal_row_passes_only_on_the_owed_exception() -> None:
    row = BY_NAME["dsa_sparse_attention_bwd.deterministic"]
    owed = ValueError("deterministic DSA backward requires SM100")
    assert frontend_refusal.judge(row, _raises(owed), "off")[0] == "pass"
    status, why = frontend_refusal.judge(row, lambda: None, "off")
    assert status == "fail" and "ran" in why  # it ran where it had to refuse
    assert frontend_refusal.judge(row, _raises(RuntimeError("symbol")), "off")[0] == "error"
    # a ValueError of bad inputs is not the refusal (what 1.32.0 says of CPU tensors)
    bad_input = ValueError("Q must live on CUDA, got cpu")
    assert frontend_refusal.judge(row, _raises(bad_input), "off")[0] == "error"


def test_the_warn_only_row_needs_the_warning_and_a_run_and_sees_the_flag() -> None:
    row = BY_NAME["causal_conv1d_bwd.bias_flag_warn_only"]
    seen: list[tuple[bool, bool]] = []

    def warns() -> object:
        seen.append(state())
        warnings.warn("backward is not deterministic: dbias atomics", RuntimeWarning, stacklevel=1)
        return None

    assert frontend_refusal.judge(row, warns, "warn_only")[0] == "pass"
    assert seen == [(True, True)] and state() == (False, False)
    assert frontend_refusal.judge(row, lambda: None, "warn_only")[0] == "fail"
    on = BY_NAME["causal_conv1d_bwd.bias_flag_on"]
    owed = RuntimeError("causal_conv1d backward is not deterministic: dbias accumulates ...")
    assert frontend_refusal.judge(on, _raises(owed), "on")[0] == "pass"
    unrelated = RuntimeWarning("some other warning")
    assert (
        frontend_refusal.judge(row, lambda: warnings.warn(unrelated, stacklevel=1), "warn_only")[0]
        == "fail"
    )


def test_rows_without_a_gpu_are_skipped_never_passed() -> None:
    for check in frontend_refusal.checks(None, None, None):
        assert check["status"] in ("skipped", "not_applicable"), check


def _summary(**kw: object) -> str:
    return surface.summary(surface.coverage(KNOBS_1_32, compiled=COMPILED, **kw))  # type: ignore[arg-type]


def test_1_32_coverage_cpu_only_and_on_an_sm_90_fleet() -> None:
    assert _summary(exercised={}) == (
        "41 knobs: 0 exercised, 3 compile-only, 0 refusal-only, 38 not covered"
    )
    sm90 = {"sdpa_bwd", "flex_attention_bwd", "sdpa_torch_bwd", "sdpa_torch_thd_bwd"}
    refused = {r.name: {"sm_90"} for r in FRONTEND_REFUSALS if not r.min_backend}
    fleet = _summary(exercised={s: {"sm_90"} for s in sm90}, refused=refused)
    assert fleet == "41 knobs: 3 exercised, 3 compile-only, 2 refusal-only, 33 not covered"
    rows = surface.coverage(KNOBS_1_32, {s: {"sm_90"} for s in sm90}, COMPILED, refused)
    by = {(r["entry_point"], r["knob"]): r for r in rows}
    flag_row = by[("cudnn.sdpa.fwd.torch_op._sdpa_backward", "torch flag")]
    assert flag_row["subject"] == "sdpa_torch_bwd" and flag_row["status"] == "exercised"
    assert flag_row["subjects"] == ["sdpa_torch_bwd", "sdpa_torch_thd_bwd"]
    # one path alone does not exercise the knob: the other's code never ran with the flag on
    dense_only = surface.coverage(KNOBS_1_32, {"sdpa_torch_bwd": {"sm_90"}}, COMPILED)
    row = {(r["entry_point"], r["knob"]): r for r in dense_only}[
        ("cudnn.sdpa.fwd.torch_op._sdpa_backward", "torch flag")
    ]
    assert row["status"] == "not_covered" and "sdpa_torch_thd_bwd" in row["why"], row
    dsa = "cudnn.deepseek_sparse_attention."
    for wrapper in ("sparse_attention_backward_wrapper", "indexer_backward_wrapper"):
        assert by[(dsa + wrapper, "deterministic")]["status"] == "refusal_only"
    conv = by[("cudnn.ops.causal_conv1d._run_causal_conv1d_bulk_backend", "torch flag")]
    assert conv["subject"] == "causal_conv1d_bwd" and conv["status"] == "not_covered"
    cpu = surface.coverage(KNOBS_1_32, {}, COMPILED)
    cpu_by = {(r["entry_point"], r["knob"]): r for r in cpu}
    why = cpu_by[(dsa + "indexer_backward_wrapper", "deterministic")]["why"]
    assert why.startswith("would run as dsa_indexer_bwd on sm_100; would be refusal-only")
    assert "sm_90" in why


def test_knobs_with_a_refusal_row_or_a_torch_flag_subject_are_no_longer_warned() -> None:
    named = " ".join(f["message"] for f in surface.uncovered(KNOBS_1_32))
    assert "sparse_attention_backward_wrapper(deterministic" not in named
    assert "indexer_backward_wrapper(deterministic=" not in named
    assert "torch_op._sdpa_backward" not in named and "_run_causal_conv1d_bulk_backend" not in named
    assert "indexer_top_k_wrapper(deterministic" not in named  # the indexer_top_k subject's
    assert "CSACompressorBackward(deterministic" in named  # still uncovered, still said


def _reads_it() -> bool:
    return torch.are_deterministic_algorithms_enabled()


def _mentions_it() -> None:
    """Follows torch.are_deterministic_algorithms_enabled(), says the docstring only."""
    # torch.are_deterministic_algorithms_enabled()


def test_the_torch_flag_is_read_from_code_never_from_text() -> None:
    from runner.inside.introspect import read_parameters

    assert read_parameters(_reads_it, "torch_flag") == (
        {"torch_flag": "torch.are_deterministic_algorithms_enabled()"},
        "torch_flag",
    )
    assert read_parameters(_mentions_it, "torch_flag") == ({}, "torch_flag")
    assert read_parameters(len, "torch_flag") == (None, None)  # no source: unreadable


def test_1_32_coverage_where_every_compile_only_subject_is_compiled() -> None:
    """What a build of 1.32.0 reads with today's compile-only subjects: a determinism stage
    without a GPU (``fe-ci validate`` on a CPU host) compiles every one, flex attention's sm_100
    backward too; an sm_90 job compiles those it does not run."""
    from runner.inside.compileonly import COMPILE_ONLY

    on_cpu = set(COMPILE_ONLY)
    assert {"dsa_indexer_bwd", "csa_compressor_bwd", "flex_attention_bwd"} <= on_cpu
    cpu = surface.coverage(KNOBS_1_32, {}, on_cpu)
    assert surface.summary(cpu) == (
        "41 knobs: 0 exercised, 7 compile-only, 0 refusal-only, 34 not covered"
    )
    sm90 = {n for n, s in SUBJECTS.items() if "sm_90" in s.families and not s.min_backend}
    on_gpu = {n for n in on_cpu if n not in sm90}
    refused = {r.name: {"sm_90"} for r in FRONTEND_REFUSALS if not r.min_backend}
    fleet = surface.coverage(KNOBS_1_32, {s: {"sm_90"} for s in sm90}, on_gpu, refused)
    assert surface.summary(fleet) == (
        "41 knobs: 5 exercised, 6 compile-only, 0 refusal-only, 30 not covered"
    )
    by = {(r["entry_point"], r["knob"]): r["status"] for r in fleet}
    assert by[("cudnn.csa_compressor_backward_wrapper", "deterministic")] == "compile_only"
    dsa = "cudnn.deepseek_sparse_attention."
    assert by[(dsa + "indexer_backward_wrapper", "deterministic")] == "compile_only"
    assert by[("cudnn.flex_attn_func", "deterministic")] == "exercised"
    cpu_by = {(r["entry_point"], r["knob"]): r["status"] for r in cpu}
    assert cpu_by[("cudnn.flex_attn_func", "deterministic")] == "compile_only"
