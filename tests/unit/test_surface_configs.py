"""The determinism surface's new configs and subject, on CPU: sdpa_bwd's grouped-query, packed THD
and dBias configs, flex attention's grouped-query and head dim 256, and ``indexer_top_k``; their
references against torch autograd (or the documented order), where the walk reaches them, and
what ``fe-ci configs`` lists. Running them needs a GPU (docs/determinism.md says the commands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.subjects import SUBJECTS
from runner.inside.subjects import attention, dsa_sparse_attention_bwd, indexer_top_k
from runner.inside.subjects.attention import attention_reference, packed_forward, packed_reference
from runner.inside.subjects.base import fake_cuda

ROOT = Path(__file__).resolve().parents[2]
DENSE = ("b1_h8_s512_d64_causal", "b4_h16_s2048_d128_causal", "b4_h16_s4096_d128_causal",
         "b8_h16_s4096_d128_causal")  # fmt: skip
VARIANTS = {
    "sdpa_bwd": ("dbias_b12_h16_s4096_d128_causal", "thd_h32_d128_t20480_causal",
                 "gqa_b8_h32_hkv8_s4096_d128_causal"),
    "flex_attention_bwd": ("gqa_b4_s4096_hq32_hkv8_d128_causal", "hd256_b4_s4096_h32_d256_causal"),
}  # fmt: skip


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_dense_walk_is_unchanged_and_the_other_engines_follow_it() -> None:
    """The walk (small to large) meets the dense configs measured on the H200 first, in their
    order, so their escalation is as before; the new engines come after, each reached by a pin
    (``--config``) or when no dense config varied."""
    assert SUBJECTS["sdpa_bwd"].config_names == (*DENSE, *VARIANTS["sdpa_bwd"])
    flex = SUBJECTS["flex_attention_bwd"].config_names
    assert flex[-2:] == VARIANTS["flex_attention_bwd"] and len(flex) == 5
    params = dict(SUBJECTS["sdpa_bwd"].configs)
    assert params["dbias_b12_h16_s4096_d128_causal"]["bias"] is True
    assert params["thd_h32_d128_t20480_causal"]["layout"] == "thd"
    gqa = params["gqa_b8_h32_hkv8_s4096_d128_causal"]
    assert attention.kv_heads(gqa) == 8 and gqa["h"] // 8 == 4  # four query heads per K/V head
    assert attention.kv_heads(params[DENSE[0]]) == params[DENSE[0]]["h"]
    with pytest.raises(ValueError, match="multiple"):
        attention.kv_heads({"h": 6, "h_kv": 4})


def test_shapes_read_the_layout_of_every_attention_config() -> None:
    for name in ("sdpa_bwd", "sdpa_torch_bwd", "flex_attention_bwd"):
        for config, params in SUBJECTS[name].configs:
            shape, lens = attention.shapes(dict(params))
            if params.get("layout") == "thd":
                assert lens is not None and shape == (sum(lens), params["h"], params["d"]), config
            else:
                assert lens is None and len(shape) == 4, config


def test_the_grouped_query_reference_matches_autograd() -> None:
    q, d_o = _randn(2, 6, 24, 8, seed=1), _randn(2, 6, 24, 8, seed=2)
    k, v = _randn(2, 2, 24, 8, seed=3), _randn(2, 2, 24, 8, seed=4)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    kx, vx = (t.repeat_interleave(3, dim=1) for t in leaves[1:])  # query head i reads i // 3
    out = torch.nn.functional.scaled_dot_product_attention(leaves[0], kx, vx, is_causal=True,
                                                           scale=0.3)  # fmt: skip
    out.backward(d_o)
    got = attention_reference(q, k, v, d_o, causal=True, scale=0.3, heads_per_chunk=4)
    for name, leaf in zip(("dq", "dk", "dv"), leaves, strict=True):
        assert leaf.grad is not None and got[name].shape == leaf.shape
        torch.testing.assert_close(got[name].double(), leaf.grad, rtol=1e-4, atol=1e-5)


def test_the_bias_reference_gives_dbias_summed_over_the_batch() -> None:
    q, k, v, d_o = (_randn(3, 2, 16, 8, seed=i) for i in range(4))
    bias = _randn(1, 2, 16, 16, seed=9) * 0.5
    leaves = [t.clone().requires_grad_() for t in (q, k, v, bias)]
    mask = torch.ones(16, 16, dtype=torch.bool).triu(1)
    scores = 0.3 * leaves[0] @ leaves[1].transpose(-1, -2) + leaves[3]
    p = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    (p @ leaves[2]).backward(d_o)
    got = attention_reference(q, k, v, d_o, causal=True, scale=0.3, bias=bias)
    for name, leaf in zip(("dq", "dk", "dv", "dbias"), leaves, strict=True):
        assert leaf.grad is not None
        torch.testing.assert_close(got[name].double(), leaf.grad, rtol=1e-4, atol=1e-5)


def test_the_packed_forward_and_reference_treat_each_sequence_alone() -> None:
    lens, h, d = [5, 9, 3], 2, 8
    q, k, v, d_o = (_randn(sum(lens), h, d, seed=10 + i).float() for i in range(4))
    o, stats = packed_forward(q, k, v, lens, scale=0.4)
    assert stats.shape == (3, h, 9, 1) and float(stats[2, :, 3:].abs().max()) == 0.0  # padded
    start = 0
    for bi, n in enumerate(lens):  # the middle sequence, alone, through torch's own attention
        one = [t[start : start + n].transpose(0, 1) for t in (q, k, v)]
        want = torch.nn.functional.scaled_dot_product_attention(*one, is_causal=True, scale=0.4)
        torch.testing.assert_close(o[start : start + n], want.transpose(0, 1), rtol=1e-5,
                                   atol=1e-5)  # fmt: skip
        scores = 0.4 * one[0] @ one[1].transpose(-1, -2)
        lse = torch.logsumexp(scores.masked_fill(torch.ones(n, n).triu(1).bool(), -1e30), -1)
        torch.testing.assert_close(stats[bi, :, :n, 0], lse, rtol=1e-5, atol=1e-5)
        start += n
    grads = packed_reference(q, k, v, d_o, lens, scale=0.4)
    assert all(g.shape == (sum(lens), h, d) for g in grads.values())
    first = attention_reference(*(t[:5].transpose(0, 1)[None] for t in (q, k, v, d_o)),
                                causal=True, scale=0.4)  # fmt: skip
    torch.testing.assert_close(grads["dk"][:5], first["dk"][0].transpose(0, 1))


def test_indexer_top_k_inputs_tie_and_the_reference_is_the_documented_order() -> None:
    first = indexer_top_k.CONFIGS[0]
    values = indexer_top_k.tied_values(first.params, torch.device("cpu"))
    assert values.shape == (first.params["rows"], first.params["cols"])
    assert values.unique().numel() == first.params["levels"]  # thousands of ties a level
    ref = indexer_top_k.top_k_reference(values, first.params["top_k"])
    idx = ref["indices"]
    assert idx.dtype == torch.int32 and idx.shape == (first.params["rows"], first.params["top_k"])
    assert bool((idx[:, 1:] > idx[:, :-1]).all())  # ascending, each column once
    row = values[0]
    cut = float(ref["values"][0].min())
    chosen = set(idx[0].tolist())
    assert all(float(row[i]) >= cut for i in chosen)
    assert all(i in chosen for i in range(row.numel()) if float(row[i]) > cut)  # all above it
    at_cut = [i for i in range(row.numel()) if float(row[i]) == cut]
    taken = [i for i in at_cut if i in chosen]
    assert taken == at_cut[: len(taken)]  # ties go to the smaller column
    torch.testing.assert_close(ref["values"], values.gather(1, idx.long()))


def test_indexer_top_k_is_a_subject_of_sm_90_with_the_wrappers_knob() -> None:
    s = SUBJECTS["indexer_top_k"]
    assert (s.entry_point, s.knob, s.probe_method) == (
        "cudnn.deepseek_sparse_attention.indexer_top_k_wrapper",
        "deterministic",
        "signature",
    )
    assert s.families == ("sm_90", "sm_100") and s.history["since"] == "1.32.0"
    assert set(s.outputs) == {"indices", "values"}


def test_fe_ci_configs_lists_the_new_configs() -> None:
    def listing(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "cli.main", "configs", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    top_k = listing("indexer_top_k")
    assert "indexer_top_k  (knob deterministic" in top_k
    assert top_k.index("rows64_cols8192") < top_k.index("rows1024_cols65536")
    sdpa = listing("sdpa_bwd")
    assert all(name in sdpa for name in VARIANTS["sdpa_bwd"])
    assert sdpa.index("b8_h16_s4096_d128_causal") < sdpa.index("dbias_b12")
    assert "h=32 h_kv=8" in sdpa and "bias=True" in sdpa and "layout=thd" in sdpa


def test_the_dsa_reference_matches_dense_attention_masked_to_each_querys_rows() -> None:
    """The float32 reference of the sparse backward against the same attention over every KV
    row with the unselected ones masked out and the sink as one more logit, through autograd."""
    params = {"s_q": 6, "s_kv": 40, "h": 4, "topk": 8}
    x = dsa_sparse_attention_bwd.inputs(params, torch.device("cpu"))
    assert x["idx"].dtype == torch.int32 and x["idx"].shape == (6, 8)
    assert all(row.unique().numel() == 8 for row in x["idx"])  # distinct rows per query
    got = dsa_sparse_attention_bwd.dsa_reference(x["q"], x["kv"], x["idx"], x["sink"],
                                                 x["dout"], x["scale"], chunk=4)  # fmt: skip
    q, kv, sink = (t.detach().double().requires_grad_() for t in (x["q"], x["kv"], x["sink"]))
    mask = torch.full((6, 40), float("-inf"), dtype=torch.float64)
    mask.scatter_(1, x["idx"].long(), 0.0)
    scores = x["scale"] * torch.einsum("shd,td->sht", q, kv) + mask[:, None, :]
    logits = torch.cat([scores, sink.view(1, -1, 1).expand(6, -1, 1)], dim=-1)
    p = torch.softmax(logits, dim=-1)[..., :-1]
    torch.einsum("sht,td->shd", p, kv[:, :512]).backward(x["dout"].double())
    for name, leaf in (("dq", q), ("dkv", kv), ("d_sink", sink)):
        assert leaf.grad is not None
        torch.testing.assert_close(got[name].double(), leaf.grad, rtol=1e-4, atol=1e-4)


def test_the_dsa_compile_uses_fake_cuda_tensors_of_the_declared_shapes() -> None:
    spec = dsa_sparse_attention_bwd.shapes(dict(SUBJECTS["dsa_sparse_attention_bwd"].configs[1][1]))
    made = fake_cuda(*spec.values())
    assert [(tuple(t.shape), t.dtype, t.device.type) for t in made] == [
        (shape, dtype, "cuda") for shape, dtype in spec.values()
    ]
    s = SUBJECTS["dsa_sparse_attention_bwd"]
    assert s.compile_only and s.families == ("sm_100",) and s.knob == "deterministic"
