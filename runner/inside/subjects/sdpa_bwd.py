"""``sdpa_bwd``: the cuDNN graph API's SDPA backward, ``use_deterministic_algorithm`` on and off.

The forward runs once per config (bf16, causal, top-left diagonal) to give O and the softmax
statistics; each run is then one execution of a prebuilt backward graph into zeroed dQ/dK/dV
buffers. Two backward graphs are built, one per knob value, before any timed run. The reference
is the attention backward written out in float32 from the same bf16 inputs
(``runner/inside/subjects/attention.py``).

Besides the dense configs, three of the backward's other engines, each a config: grouped-query
(``h_kv``: K and V with fewer heads, whose dK and dV sum over the query heads of a group),
packed THD (``layout: "thd"``: ragged sequences addressed by ragged offsets, the forward's O and
statistics computed in float32 since the statistics stay padded) and dBias (``bias``: a
[1, H, S, S] additive bias shared by the batch, whose gradient takes the dP-workspace path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects import attention
from runner.inside.subjects.attention import attention_reference
from runner.inside.subjects.base import Harness, Prepared, configs_of, seeded, tolerances_of

DECLARATION = Subject(
    name="sdpa_bwd",
    entry_point="cudnn._compiled_module.backend_graph.sdpa_backward",
    knob="use_deterministic_algorithm",
    families=("sm_80", "sm_90", "sm_100"),
    # bf16 gradients against a float32 computation from the same bf16 inputs: a few bf16 ulps
    # of the output plus the kernel's bf16 rounding of P and dS before its matrix products.
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dk": {"atol": 2e-2, "rtol": 2e-2},
        "dv": {"atol": 2e-2, "rtol": 2e-2},
    },
    probe_method="docstring",
    alternates=("cudnn._compiled_module.pygraph.sdpa_backward",),
    # Ordered small to large; escalation walks them in this order. Measured on an H200
    # (docs/determinism.md): the first never varied, the second varied weakly, the larger ones
    # strongly.
    configs=(
        ("b1_h8_s512_d64_causal", {"b": 1, "h": 8, "s": 512, "d": 64, "causal": True}),
        ("b4_h16_s2048_d128_causal", {"b": 4, "h": 16, "s": 2048, "d": 128, "causal": True}),
        ("b4_h16_s4096_d128_causal", {"b": 4, "h": 16, "s": 4096, "d": 128, "causal": True}),
        ("b8_h16_s4096_d128_causal", {"b": 8, "h": 16, "s": 4096, "d": 128, "causal": True}),
        # The other engines, after the dense walk (they change no dense measurement): dBias with
        # its bias shared by the batch (b2 h16 s1024 never varied on the H200, so larger),
        # packed THD, and GQA (b4 h16 hkv4 s2048 varied in 10 of 11 on the H200).
        (
            "dbias_b12_h16_s4096_d128_causal",
            {"b": 12, "h": 16, "s": 4096, "d": 128, "causal": True, "bias": True},
        ),
        (
            "thd_h32_d128_t20480_causal",
            {"layout": "thd", "lens": [4096, 6144, 2048, 8192], "h": 32, "d": 128, "causal": True},
        ),
        (
            "gqa_b8_h32_hkv8_s4096_d128_causal",
            {"b": 8, "h": 32, "h_kv": 8, "s": 4096, "d": 128, "causal": True},
        ),
    ),
    history={
        "since": "1.5.0",
        "source": "cuDNN frontend 1.5.0 (June 2024) added the deterministic SDPA backward "
        "setting, as cited by karpathy/llm.c#652 and openxla/xla#14125",
        "evidence": "the compiled module carries 'use_deterministic_algorithm' from 1.5.0 on "
        "(absent in 1.3.0 and 1.4.0); the method lives on _compiled_module.pygraph up to 1.26.0 "
        "and on _compiled_module.backend_graph from 1.27.0; releases before 1.15.0 cannot be "
        "imported without libcudnn",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)


def _round64(n: int) -> int:
    return -(-n // 64) * 64


@dataclass
class SdpaWorkload(Prepared):
    def __post_init__(self) -> None:
        import cudnn

        p = self.config.params
        shape, self.lens = attention.shapes(p)
        h, d, h_kv = p["h"], p["d"], attention.kv_heads(p)
        self.scale = 1.0 / math.sqrt(d)
        gen = seeded(20260817, self.device)

        def randn(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, generator=gen, device=self.device).to(torch.bfloat16)

        kv_shape = (*shape[:-2], h_kv, d) if self.lens else (shape[0], h_kv, *shape[2:])
        self.q, self.k, self.v = randn(*shape), randn(*kv_shape), randn(*kv_shape)
        self.d_o = randn(*shape)
        self.bias = randn(1, h, p["s"], p["s"]) * 0.5 if p.get("bias") else None
        self.grads = {"dq": torch.empty_like(self.q), "dk": torch.empty_like(self.k),
                      "dv": torch.empty_like(self.v)}  # fmt: skip
        if self.bias is not None:
            self.grads["dbias"] = torch.empty_like(self.bias)
        self.handle = cudnn.create_handle()
        cudnn.set_stream(handle=self.handle, stream=torch.cuda.current_stream().cuda_stream)
        self.ragged: dict[str, torch.Tensor] = {}
        if self.lens is not None:  # the forward in float32: THD statistics stay padded
            self.o, self.stats = attention.packed_forward(
                self.q, self.k, self.v, self.lens, scale=self.scale
            )
            cu = attention.cu_seqlens(self.lens, self.device).to(torch.int64)
            self.ragged = {"offsets": cu * h * d, "lens": (cu[1:] - cu[:-1]).to(torch.int32)}
            fwd_ws = 0
        else:
            self.o = torch.empty_like(self.q)
            self.stats = torch.empty(*shape[:3], 1, dtype=torch.float32, device=self.device)
            fwd, fwd_io = self._forward(cudnn)
            fwd_ws = fwd.get_workspace_size()
        backward = {knob: self._backward(cudnn, knob) for knob in (False, True)}
        sizes = [fwd_ws] + [g.get_workspace_size() for g, _ in backward.values()]
        self.workspace = torch.empty(max(sizes), dtype=torch.uint8, device=self.device)
        if self.lens is None:
            fwd.execute(fwd_io, self.workspace, handle=self.handle)
        self.backward = backward

    def _causal(self) -> dict[str, Any]:
        if not self.config.params["causal"]:
            return {}
        return {"diagonal_band_right_bound": 0}

    def _graph(self, cudnn: Any) -> Any:
        return cudnn.pygraph(
            io_data_type=cudnn.data_type.BFLOAT16,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=self.handle,
        )

    def _build(self, cudnn: Any, graph: Any) -> None:
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()

    def _forward(self, cudnn: Any) -> tuple[Any, dict[Any, torch.Tensor]]:
        g = self._graph(cudnn)
        q, k, v = (g.tensor_like(t) for t in (self.q, self.k, self.v))
        bias = g.tensor_like(self.bias) if self.bias is not None else None
        o, stats = g.sdpa(
            q=q, k=k, v=v, generate_stats=True, attn_scale=self.scale, bias=bias, **self._causal()
        )
        o.set_output(True).set_dim(self.o.size()).set_stride(self.o.stride())
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        stats.set_dim(self.stats.size()).set_stride(self.stats.stride())
        self._build(cudnn, g)
        io = {q: self.q, k: self.k, v: self.v, o: self.o, stats: self.stats}
        if self.bias is not None:
            io[bias] = self.bias
        return g, io

    def _packed_dims(self, t: torch.Tensor) -> tuple[list[int], list[int]]:
        """A packed [T, H, D] tensor's dims and strides as the graph's [B, H, max(lens), D]."""
        _, h, d = t.shape
        s = max(self.lens or [1])
        return [len(self.lens or []), h, s, d], [s * h * d, d, h * d, 1]

    def _thd(self, cudnn: Any, g: Any) -> tuple[list[Any], dict[str, Any], dict[Any, Any], Any]:
        """The packed operands, the backward's THD arguments, their buffers, and the graph's
        ragged offsets (element offsets, Q, K, V, O and the gradients alike)."""
        b = len(self.lens or [])
        offsets = self.ragged["offsets"].view(b + 1, 1, 1, 1)
        lens = self.ragged["lens"].view(b, 1, 1, 1)
        ro, rl = g.tensor_like(offsets), g.tensor_like(lens)
        tensors = []
        for t in (self.q, self.k, self.v, self.o, self.d_o):
            dims, strides = self._packed_dims(t)
            one = g.tensor(dim=dims, stride=strides, data_type=cudnn.data_type.BFLOAT16)
            one.set_ragged_offset(ro)
            tensors.append(one)
        total = _round64(sum(self.lens or []))
        kwargs = {"use_padding_mask": True, "seq_len_q": rl, "seq_len_kv": rl,
                  "max_total_seq_len_q": total, "max_total_seq_len_kv": total}  # fmt: skip
        return tensors, kwargs, {ro: offsets, rl: lens}, ro

    def _backward(self, cudnn: Any, knob: bool) -> tuple[Any, dict[Any, torch.Tensor]]:
        g = self._graph(cudnn)
        extra: dict[str, Any] = {}
        io: dict[Any, torch.Tensor] = {}
        ragged = None
        if self.lens is not None:
            (q, k, v, o, d_o), extra, io, ragged = self._thd(cudnn, g)
        else:
            q, k, v, o, d_o = (g.tensor_like(t) for t in (self.q, self.k, self.v, self.o, self.d_o))
        stats = g.tensor_like(self.stats)
        if self.bias is not None:
            extra["bias"] = g.tensor_like(self.bias)
            extra["dBias"] = g.tensor_like(self.grads["dbias"])
            io.update({extra["bias"]: self.bias, extra["dBias"]: self.grads["dbias"]})
        dq, dk, dv = g.sdpa_backward(
            q=q, k=k, v=v, o=o, dO=d_o, stats=stats, attn_scale=self.scale,
            use_deterministic_algorithm=knob, **self._causal(), **extra,
        )  # fmt: skip
        for name, t in (("dq", dq), ("dk", dk), ("dv", dv)):
            buf = self.grads[name]
            if ragged is not None:  # packed like the inputs
                dims, strides = self._packed_dims(buf)
                t.set_output(True).set_dim(dims).set_stride(strides).set_ragged_offset(ragged)
            else:
                t.set_output(True).set_dim(buf.size()).set_stride(buf.stride())
        self._build(cudnn, g)
        io.update({q: self.q, k: self.k, v: self.v, o: self.o, d_o: self.d_o, stats: self.stats})
        io.update({dq: self.grads["dq"], dk: self.grads["dk"], dv: self.grads["dv"]})
        return g, io

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        for buf in self.grads.values():
            buf.zero_()
        graph, io = self.backward[knob]
        graph.execute(io, self.workspace, handle=self.handle)
        return {name: buf.clone() for name, buf in self.grads.items() if name in TOLERANCES}

    def reference(self) -> dict[str, torch.Tensor]:
        if self.lens is not None:
            return attention.packed_reference(
                self.q, self.k, self.v, self.d_o, self.lens, scale=self.scale
            )
        causal = bool(self.config.params["causal"])
        grads = attention_reference(
            self.q, self.k, self.v, self.d_o, causal=causal, scale=self.scale, bias=self.bias
        )
        return {name: grads[name] for name in TOLERANCES}


# cuDNN compiles its engines' kernels in every process: built ahead at the comparison point in a
# process beside the stage (``runner/inside/ahead.py``), they reach this one through the CUDA
# driver's cache
SUBJECT = Harness(DECLARATION, SdpaWorkload, compiled_per_process=True)
