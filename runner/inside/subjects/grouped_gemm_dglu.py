"""``grouped_gemm_dglu``: the MXFP8 grouped-GEMM dSwiGLU backward (``act_func="dswiglu"``).

The same fused-MLP inputs as ``grouped_gemm_dsrelu``, except that C, the FC1 output, is twice as
wide: 32-column blocks alternate gate (even blocks) and linear (odd blocks). The kernel reduces
``dprob[t] = sum_n silu(gate) * linear * G`` across N-tiles; ``deterministic`` (where the build
has it) makes that bit-exact. It is documented not to cover dbias, so only dprob is compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from core.subjects import Subject
from runner.inside.subjects.base import (
    Config,
    Harness,
    Prepared,
    Tolerance,
    configs_of,
    tolerances_of,
)
from runner.inside.subjects.grouped_gemm_dsrelu import WRAPPER_KWARGS, MoeInputs, build_moe_inputs

DECLARATION = Subject(
    name="grouped_gemm_dglu",
    entry_point="cudnn.grouped_gemm_dglu_wrapper_sm100",
    knob="deterministic",
    families=("sm_100",),
    outputs={"dprob": {"atol": 1e-1, "rtol": 1e-2}},
    fixed_kwargs={"act_func": "dswiglu"},
    note="documented not to cover dbias",
    compile_only=True,
    activation="swiglu",
    consumer_class="GroupedMLP_CuTeGEMMGLU",
    configs_from="grouped_gemm_dsrelu",  # its shapes (C twice as wide)
    history={
        "since": "1.29.1",
        "missing_in": ["1.30.0"],
        "source": "registry wheels (no release note found that names it)",
        "evidence": "wrapper first shipped in 1.21.0; absent in 1.21.0-1.29.0; present with "
        "default False in 1.29.1; absent again in the 1.30.0 release; present with default False "
        "in 1.31.0-1.32.0",
    },
)

GLU_BLOCK = 32
ACT_FUNC = DECLARATION.fixed_kwargs["act_func"]
CONFIGS = configs_of(DECLARATION)
TOLERANCES: dict[str, Tolerance] = tolerances_of(DECLARATION)


def split_glu(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[m, 2n]`` -> (gate, linear), each ``[m, n]``, from alternating 32-column blocks."""
    m, width = c.shape
    blocks = c.reshape(m, width // (2 * GLU_BLOCK), 2, GLU_BLOCK)
    return blocks[:, :, 0].reshape(m, -1), blocks[:, :, 1].reshape(m, -1)


def dglu_reference(x: MoeInputs) -> dict[str, torch.Tensor]:
    g = x.gemm_reference()
    gate, linear = split_glu(x.c[:, :, 0].float())
    return {"dprob": (torch.nn.functional.silu(gate) * linear * g).sum(dim=1).view(-1, 1, 1)}


def dglu_kwargs(x: MoeInputs, knob: bool) -> dict[str, Any]:
    """The wrapper's arguments for ``x``, the knob as given (a fresh zeroed dprob each call)."""
    return {
        "a_tensor": x.a, "c_tensor": x.c, "sfa_tensor": x.sfa, "padded_offsets": x.padded_offsets,
        "alpha_tensor": x.alpha, "beta_tensor": x.beta, "prob_tensor": x.prob,
        "dprob_tensor": torch.zeros_like(x.prob), "b_tensor": x.b, "sfb_tensor": x.sfb,
        "norm_const_tensor": x.norm_const, "d_dtype": torch.float8_e4m3fn, "act_func": ACT_FUNC,
        "deterministic": knob, **WRAPPER_KWARGS,
    }  # fmt: skip


@dataclass
class DgluWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn import grouped_gemm_dglu_wrapper_sm100

        self.fn = grouped_gemm_dglu_wrapper_sm100
        n = self.config.params["n"]
        self.x = build_moe_inputs(self.config.params, self.device, c_width=2 * n, seed=1029)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        out = self.fn(**dglu_kwargs(self.x, knob))
        return {"dprob": out["dprob_tensor"]}

    def reference(self) -> dict[str, torch.Tensor]:
        return dglu_reference(self.x)


SUBJECT = Harness(DECLARATION, DgluWorkload)


def compile_target(config: Config, knob: bool) -> tuple[Any, Any, list[Any]]:
    """For ``base.compile_only``: the wrapper call, its kernel class and modules to answer for."""
    from cudnn.gemm.cutedsl.grouped.dglu import api

    n = config.params["n"]
    x = build_moe_inputs(config.params, torch.device("cpu"), c_width=2 * n, seed=1029)

    def call() -> Any:
        return api.grouped_gemm_dglu_wrapper_sm100(**dglu_kwargs(x, knob))

    return call, api.GroupedGemmDgluSm100, [api]
