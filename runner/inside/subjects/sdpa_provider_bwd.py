"""``sdpa_provider_bwd``: PyTorch's own SDPA served by the frontend (``cudnn.torch``), backward
through autograd, knob the torch flag in warn-only mode.

``cudnn.torch.install()`` (1.29.0 on) overrides the CUDA kernels of
``aten::_scaled_dot_product_cudnn_attention`` and its backward: a plain
``F.scaled_dot_product_attention`` under ``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])`` then runs
on the frontend's Python API, and the backward, ``cudnn.torch.sdpa_provider._bwd``, calls
``torch.ops.cudnn.sdpa_bwd`` with ``is_deterministic=torch.are_deterministic_algorithms_enabled()``.

PyTorch reaches that backward only with the flag off or in warn-only mode: under the strict flag
its backend selection rules cuDNN attention out (cuDNN alone: "No available kernel"; every
backend: its own flash attention runs), measured on an H100 with torch 2.11
(``docs/measurements/h100-2026-12-06.md``). So the control arm runs with the flag off and the
deterministic arm with ``warn_only=True`` on every run, the one setting a user can reach the
provider's deterministic path with. Each run must have been served by the provider's Python path
(its ``calls["bwd"]`` counter one higher): a backward PyTorch handed elsewhere, or to the
provider's C++ fallback, raises rather than counting bytes of another kernel as this subject's.

The override is for the whole stage process (``install()`` has no undo before 1.32.0); no other
subject calls PyTorch's SDPA. Inputs, configs and the reference are ``sdpa_torch_bwd``'s (dense
BHSD, bf16, causal).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from core.subjects import Subject
from runner.inside.subjects.base import Harness, configs_of, tolerances_of
from runner.inside.subjects.sdpa_torch_bwd import SdpaTorchWorkload
from runner.inside.torchflag import Arms

DECLARATION = Subject(
    name="sdpa_provider_bwd",
    entry_point="cudnn.torch.sdpa_provider._bwd",
    knob="torch_flag",
    families=("sm_90", "sm_100"),
    # bf16 gradients against a float32 computation from the same bf16 inputs, as sdpa_bwd's.
    outputs={
        "dq": {"atol": 2e-2, "rtol": 2e-2},
        "dk": {"atol": 2e-2, "rtol": 2e-2},
        "dv": {"atol": 2e-2, "rtol": 2e-2},
    },
    note="PyTorch's SDPA on the frontend's Python API (cudnn.torch.install); control: flag off, "
    "deterministic arm: warn_only=True (the strict flag rules cuDNN attention out in PyTorch)",
    backward_of="cudnn.torch's SDPA provider",
    configs_from="sdpa_torch_bwd",
    history={
        "since": "1.29.0",
        "source": "registry wheels; an H100 with torch 2.11 (docs/measurements/h100-2026-12-06.md)",
        "evidence": "1.28.0 has no cudnn.torch; 1.29.0-1.32.0: cudnn.torch.sdpa_provider._bwd "
        "passes is_deterministic=torch.are_deterministic_algorithms_enabled(); on an H100 at "
        "b4_h16_s4096_d128 its dq varied with the flag off (3 and 4 distinct of 8) and was "
        "byte-exact over 8 runs with warn_only=True",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)


class NotServed(RuntimeError):
    """PyTorch did not hand the backward to the provider's Python path."""


@dataclass
class SdpaProviderWorkload(SdpaTorchWorkload):
    arms: Arms = field(default_factory=lambda: Arms(("warn_only",)))

    def __post_init__(self) -> None:
        super().__post_init__()
        import cudnn.torch
        from cudnn.torch import sdpa_provider
        from torch.nn.attention import SDPBackend

        cudnn.torch.install()
        self.calls = sdpa_provider.calls
        self.backends = [SDPBackend.CUDNN_ATTENTION]

    def _once(self) -> dict[str, torch.Tensor]:
        from torch.nn.attention import sdpa_kernel

        def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            sdpa = torch.nn.functional.scaled_dot_product_attention
            return sdpa(q, k, v, is_causal=True, scale=self.scale)

        before = dict(self.calls)
        with warnings.catch_warnings(), sdpa_kernel(self.backends):
            # warn-only mode warns that cuDNN attention is not deterministic: the finding is in
            # the bytes, not in the warning
            warnings.simplefilter("ignore", UserWarning)
            grads = self._step(forward)
        served = {
            k: self.calls[k] - before.get(k, 0)
            for k in self.calls
            if self.calls[k] != before.get(k, 0)
        }
        if served != {"fwd": 1, "bwd": 1}:
            raise NotServed(
                "cudnn.torch's provider did not serve this run on its Python path (calls "
                f"counted: {served or 'none'}): PyTorch chose another kernel"
            )
        return grads


# cuDNN compiles its engines' kernels in every process: built ahead at the comparison point in a
# process beside the stage (``runner/inside/ahead.py``), they reach this one through the CUDA
# driver's cache
SUBJECT = Harness(DECLARATION, SdpaProviderWorkload, compiled_per_process=True)
