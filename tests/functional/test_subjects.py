"""The subjects' input building and float32 references, on CPU; their kernels on a GPU.

The references are checked against torch autograd of the forward they differentiate, and the
MXFP8 operands against the layout and quantization the grouped-GEMM kernels read. The kernels
themselves need cuDNN on a GPU (sm_100 for the grouped GEMMs) and are skipped elsewhere.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from core.subjects import SUBJECTS
from runner.inside.compileonly import COMPILE_ONLY
from runner.inside.subjects import flex_attention_bwd, grouped_gemm_dglu, grouped_gemm_dsrelu
from runner.inside.subjects.attention import attention_reference

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
dsrelu = grouped_gemm_dsrelu


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_what_the_registry_reads_from_the_source_is_what_the_module_declares(name: str) -> None:
    """The registry reads each declaration by ``ast``, the harness runs the module: one value."""
    module = importlib.import_module(f"runner.inside.subjects.{name}")
    assert SUBJECTS[name] == module.DECLARATION
    subject = module.SUBJECT
    assert subject.name == name
    assert set(module.TOLERANCES) == set(SUBJECTS[name].outputs)
    names = [c.name for c in subject.configs]
    assert len(names) == len(set(names)) >= 3


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_the_harness_walks_the_configs_the_registry_declares(name: str) -> None:
    entry = SUBJECTS[name]
    configs = importlib.import_module(entry.module_name).SUBJECT.configs
    assert [(c.name, c.params) for c in configs] == [(n, dict(p)) for n, p in entry.configs]
    assert not entry.comparison or entry.comparison in entry.config_names


def test_a_subject_definition_covers_what_its_comparisons_stand_on() -> None:
    entry = SUBJECTS["sdpa_bwd"]
    same = dataclasses.replace(entry, note="a remark", has="said otherwise")
    assert same.definition == entry.definition  # words do not start a new series
    for changed in (
        dataclasses.replace(entry, configs=entry.configs[1:]),
        dataclasses.replace(entry, configs=(*entry.configs[:-1], ("b8", {"b": 8}))),
        dataclasses.replace(entry, comparison=entry.config_names[2]),
        dataclasses.replace(entry, outputs={"dq": {"atol": 2e-2, "rtol": 2e-2}}),
    ):
        assert changed.definition != entry.definition


def _work(params: dict) -> int:
    if "cols" in params:  # a top-k selection: every value of every row
        return params["rows"] * params["cols"]
    if "topk" in params:  # sparse attention: each query's heads over its selected rows
        return params["s_q"] * params["h"] * params["topk"]
    if "experts" in params:
        return params["experts"] * params["tokens"] * params["n"] * params["k"]
    if "dim" in params:  # a causal convolution: every output of every channel
        return params["b"] * params["t"] * params["dim"]
    if params.get("layout") == "thd":  # packed sequences: each attends within itself
        return sum(n**2 for n in params["lens"]) * params["h"] * params["d"]
    return params["b"] * params["h"] * params["s"] ** 2 * params["d"]


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_configs_are_ordered_small_to_large(name: str) -> None:
    configs = importlib.import_module(f"runner.inside.subjects.{name}").SUBJECT.configs
    work = [_work(c.params) for c in configs]
    assert work == sorted(work) and len(set(work)) == len(work)


def test_grouped_configs_span_several_n_tiles_and_include_the_seed_shape() -> None:
    tiles = [c.params["n"] // 256 for c in dsrelu.CONFIGS]
    assert min(tiles) >= 2 and max(tiles) >= 8
    assert any(
        (c.params["experts"], c.params["tokens"], c.params["n"]) == (16, 1024, 2048)
        for c in dsrelu.CONFIGS
    )


@pytest.mark.parametrize("causal", [True, False])
def test_attention_reference_matches_autograd(causal: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v, d_o = (torch.randn(2, 3, 40, 16, generator=gen, dtype=torch.float64) for _ in "qkvo")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, scale=0.3)
    out.backward(d_o)
    got = attention_reference(q, k, v, d_o, causal=causal, scale=0.3, heads_per_chunk=4)
    for name, leaf in zip(("dq", "dk", "dv"), leaves, strict=True):
        assert leaf.grad is not None
        torch.testing.assert_close(got[name].double(), leaf.grad, rtol=1e-4, atol=1e-5)


def test_flex_causal_mask_lets_query_i_see_keys_up_to_i() -> None:
    mask = flex_attention_bwd.causal_mask_func(3, 5, CPU)
    assert mask.shape == (1, 1, 15) and mask.dtype == torch.int32 and mask.is_contiguous()
    assert mask[0, 0].tolist() == [1, 2, 3, 4, 5] * 3  # sample-local: every batch restarts


def test_tokens_are_padded_per_expert_with_end_offsets() -> None:
    counts = dsrelu.tokens_per_expert(16, 1024)
    assert len(counts) == 16 and len(set(counts)) > 1  # uneven, as routing is
    assert all(768 <= c <= 1280 for c in counts)
    sizes, ends = dsrelu.padded_layout([1, 256, 257, 600])
    assert sizes == [256, 256, 512, 768]
    assert ends.dtype == torch.int32 and ends.tolist() == [256, 512, 1024, 1792]


def test_mxfp8_quantization_uses_power_of_two_block_scales() -> None:
    x = torch.randn(8, 128, generator=torch.Generator().manual_seed(1)) * 3
    q, scale = dsrelu.quantize_mxfp8(x)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (8, 4)
    assert torch.equal(torch.exp2(torch.log2(scale).round()), scale)
    assert float(q.float().abs().max()) <= dsrelu.FP8_MAX
    back = dsrelu.dequantize_mxfp8(q, scale)
    # e4m3 keeps 3 mantissa bits: relative error at most 2^-4 of each block's scale range
    assert float(((back - x).abs() / x.abs().clamp_min(1e-3)).median()) < 2**-4


def test_blocked_scales_put_each_scale_where_the_kernel_reads_it() -> None:
    rows, cols, lanes = 300, 10, 2
    scale = torch.exp2(torch.randint(-8, 8, (lanes, rows, cols)).float())
    blocked = dsrelu.blocked_scales(scale)
    assert blocked.dtype == torch.float8_e8m0fnu
    assert blocked.shape == (32, 4, 3, 4, 3, lanes)
    torch.testing.assert_close(dsrelu.unblocked_scales(blocked, rows, cols), scale)
    storage = blocked.permute(5, 2, 4, 0, 1, 3).contiguous().view(torch.uint8).reshape(-1)
    exponent = torch.log2(scale).to(torch.int64) + 127  # E8M0 stores the biased exponent
    for lane, row, col in [(0, 0, 0), (1, 37, 5), (0, 299, 9), (1, 130, 4)]:
        atom = ((lane * 3 + row // 128) * 3 + col // 4) * 512
        inner = (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4
        assert int(storage[atom + inner]) == int(exponent[lane, row, col])


def _inputs(c_width: int) -> dsrelu.MoeInputs:
    params = {"experts": 3, "tokens": 100, "n": 64, "k": 64}
    return dsrelu.build_moe_inputs(params, CPU, c_width=c_width, seed=3)


def test_moe_inputs_have_the_kernel_layouts_and_zero_padding() -> None:
    x = _inputs(64)
    m = x.valid_m
    assert m % 256 == 0 and x.padded_offsets.tolist()[-1] == m
    assert x.a.shape == (m, 64, 1) and x.a.stride() == (64, 1, m * 64)
    assert x.b.shape == (64, 64, 3) and x.b.stride() == (64, 1, 64 * 64)
    assert x.sfa.shape == (32, 4, m // 128, 4, 1, 1) and x.sfb.shape == (32, 4, 1, 4, 1, 3)
    assert x.c.shape == (m, 64, 1) and x.c.dtype == torch.bfloat16
    assert x.c.stride() == (64, 1, m * 64)  # n-major, as the kernels check
    start = 0
    for count, size in zip(x.counts, x.sizes, strict=True):
        pad = slice(start + count, start + size)
        assert not x.a[pad].float().any() and not x.c[pad].float().any()
        assert not x.prob[pad].any() and bool((x.prob[start : start + count] > 0).all())
        start += size


def test_dsrelu_reference_is_the_derivative_of_the_forward() -> None:
    x = _inputs(64)
    g = x.gemm_reference()
    prob = x.prob[:, :, 0].clone().requires_grad_()
    c = x.c[:, :, 0].float().requires_grad_()
    (prob * torch.relu(c) ** 2 * g).sum().backward()
    ref = dsrelu.dsrelu_reference(x)
    assert prob.grad is not None and c.grad is not None
    torch.testing.assert_close(ref["dprob"].view(-1), prob.grad.view(-1))
    per_expert = [p.sum(dim=0) for p in torch.split(c.grad, x.sizes)]
    torch.testing.assert_close(ref["dbias"][:, :, 0], torch.stack(per_expert))


def test_dglu_reference_is_the_derivative_of_swiglu() -> None:
    x = _inputs(128)
    g = x.gemm_reference()
    prob = x.prob[:, :, 0].clone().requires_grad_()
    gate, linear = grouped_gemm_dglu.split_glu(x.c[:, :, 0].float())
    assert torch.equal(gate[:, :32], x.c[:, :32, 0].float())  # the first block is a gate
    assert torch.equal(linear[:, :32], x.c[:, 32:64, 0].float())
    (prob * torch.nn.functional.silu(gate) * linear * g).sum().backward()
    assert prob.grad is not None
    ref = grouped_gemm_dglu.dglu_reference(x)
    torch.testing.assert_close(ref["dprob"].view(-1), prob.grad.view(-1))


def _cudnn_gpu() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    try:
        import cudnn  # noqa: F401
    except ImportError:
        return "needs the cuDNN frontend installed"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(_cudnn_gpu() is not None, reason=_cudnn_gpu() or "")
@pytest.mark.parametrize("name", ["sdpa_bwd", "flex_attention_bwd"])
def test_attention_subjects_run_their_smallest_config_on_a_gpu(name: str) -> None:
    module = importlib.import_module(f"runner.inside.subjects.{name}")
    device = torch.device("cuda")
    work = module.SUBJECT.prepare(module.SUBJECT.configs[0], device)
    first, second = work.run(True), work.run(True)
    ref = work.reference()
    for out, t in first.items():
        assert bool(torch.isfinite(t).all())
        assert torch.equal(t.view(torch.uint8), second[out].view(torch.uint8))
        tol = work.tolerances[out]
        err = (t.float() - ref[out]).abs()
        assert bool((err <= tol.atol + tol.rtol * ref[out].abs()).all()), float(err.max())
    assert not math.isnan(float(ref["dq"].abs().max()))


@pytest.mark.slow
def test_compile_only_kernels_compile_for_sm100a_on_a_host_without_that_gpu(tmp_path: Path) -> None:
    """The real 1.32.0 wheel, on this CPU-only host: the deterministic kernels compile for sm_100a.

    The skipped check carries the compile-only result; a pass is not a check of its own, so it
    cannot count as having run the subject.
    """
    from testkit.registry import candidate_env

    env = candidate_env("1.32.0")
    caps = {name: {"importable": True, "present": True} for name in SUBJECTS}
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"capabilities": caps, "subjects": list(COMPILE_ONLY)}))
    out = tmp_path / "result.json"
    run_env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    cmd = [str(env.python), "-m", "runner.inside.determinism", "--in", str(params)]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    subprocess.run([*cmd, "--out", str(out)], check=True, env=run_env, timeout=900, cwd=cwd)
    doc = json.loads(out.read_text())
    assert doc["findings"] == []
    # the DSL's kept PTX and cubin land in the worker's own folder, not where the stage ran
    assert sorted(p.name for p in cwd.iterdir()) == []
    checks = {c["name"]: c for c in doc["checks"]}
    assert set(checks) == {f"{n}.deterministic" for n in COMPILE_ONLY}
    for check in checks.values():
        assert check["status"] == "skipped"
        result = check["metrics"]["compile_only"]
        assert result["status"] == "pass", result
        assert result["deterministic"]["targets"] == ["sm_100a"]
        assert result["deterministic"]["cubin_bytes"] > 10_000
        assert result["knob_changes_kernel"] is True
        assert "compile-only: both sm_100a kernels compiled" in check["detail"]
    # flex attention's arms each compile the mask plan's kernels and the backward's (its
    # in-process caches would have left the second arm only the kernel the knob changes)
    flex = checks["flex_attention_bwd.deterministic"]["metrics"]["compile_only"]
    assert flex["deterministic"]["kernels"] == flex["default"]["kernels"] >= 3
