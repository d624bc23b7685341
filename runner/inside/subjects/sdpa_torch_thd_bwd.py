"""``sdpa_torch_thd_bwd``: ``cudnn.sdpa_torch``'s backward through autograd on packed ragged
sequences, knob the torch flag.

The packed THD path of the op ``sdpa_torch_bwd`` exercises densely: ``cudnn.sdpa_torch`` with
``cu_seqlens_q/kv`` and ``max_seqlen_q/kv``, forward and backward (bf16, causal), the flag off
for the control arm and on (then ``warn_only=True``) for the deterministic arm, restored after
every run. A subject of its own because a walk settles at one config and the op's dense and packed
backwards are separate code, each of which must pass the flag (``sdpa_torch_bwd``'s docstring).
The workload is ``sdpa_torch_bwd``'s; the reference is the dense float32 backward of each
sequence on its own.
"""

from __future__ import annotations

from core.subjects import Subject
from runner.inside.subjects.base import Harness, configs_of, tolerances_of
from runner.inside.subjects.sdpa_torch_bwd import SdpaTorchWorkload

DECLARATION = Subject(
    name="sdpa_torch_thd_bwd",
    entry_point="cudnn.sdpa.fwd.torch_op._sdpa_backward",
    knob="torch_flag",
    families=("sm_90", "sm_100"),
    # bf16 gradients against a float32 computation from the same bf16 inputs, as sdpa_bwd's.
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dk": {"atol": 2e-2, "rtol": 2e-2},
        "dv": {"atol": 2e-2, "rtol": 2e-2},
    },
    # 1.28.0's cudnn::sdpa op (cudnn.experimental.ops) has a backward that never reads the flag:
    # the probe finds it there and says the knob is absent.
    alternates=("cudnn.experimental.ops.sdpa._sdpa_backward",),
    note="cudnn.sdpa_torch's autograd backward on packed THD sequences (cu_seqlens); control: "
    "flag off, deterministic arm: flag on, its runs alternating with warn_only=True",
    backward_of="cudnn.sdpa_torch",
    # Small to large: ragged sequences (token counts per sequence), causal, padded LSE.
    configs=(
        (
            "thd_h8_d64_t1280_causal",
            {"layout": "thd", "lens": [128, 384, 256, 512], "h": 8, "d": 64},
        ),
        (
            "thd_h16_d128_t5120_causal",
            {"layout": "thd", "lens": [1024, 1536, 512, 2048], "h": 16, "d": 128},
        ),
        (
            "thd_h16_d128_t10240_causal",
            {"layout": "thd", "lens": [2048, 3072, 1024, 4096], "h": 16, "d": 128},
        ),
        (
            "thd_h16_d128_t20480_causal",
            {"layout": "thd", "lens": [4096, 6144, 2048, 8192], "h": 16, "d": 128},
        ),
    ),
    history={
        "since": "1.29.0",
        "source": "registry wheels",
        "evidence": "1.28.0: cudnn.experimental.ops.sdpa._sdpa_backward (the cudnn::sdpa op's "
        "autograd backward) never reads torch.are_deterministic_algorithms_enabled(); "
        "1.29.0-1.32.0: cudnn.sdpa.fwd.torch_op._sdpa_backward passes "
        "is_deterministic=torch.are_deterministic_algorithms_enabled() on the packed THD path "
        "(this subject) and the dense path (sdpa_torch_bwd)",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)

# cuDNN compiles its engines' kernels in every process: built ahead at the comparison point in a
# process beside the stage (``runner/inside/ahead.py``), they reach this one through the CUDA
# driver's cache
SUBJECT = Harness(DECLARATION, SdpaTorchWorkload, compiled_per_process=True)
