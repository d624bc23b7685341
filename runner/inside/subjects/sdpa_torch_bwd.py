"""``sdpa_torch_bwd``: ``cudnn.sdpa_torch``'s backward through autograd, knob the torch flag.

``cudnn.sdpa_torch`` is the ``cudnn::sdpa_fwd`` torch op; its registered autograd backward calls
``torch.ops.cudnn.sdpa_bwd`` with ``is_deterministic=torch.are_deterministic_algorithms_enabled()``
(1.29.0 on). Each run clears the leaf gradients and runs forward and backward (bf16, causal) with
the flag as ``runner/inside/torchflag.py`` sets it: off for the control arm, on and
``warn_only=True`` in turn for the deterministic arm, restored after every run. Dense configs are
BHSD; ``thd`` configs are packed ragged sequences (``cu_seqlens``), whose reference is the dense
float32 backward of each sequence on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.inside.subjects.base import Config, Tolerance, configs_of, seeded
from runner.inside.subjects.sdpa_bwd import attention_reference
from runner.inside.torchflag import Arms

CONFIGS = configs_of("sdpa_torch_bwd")
TOLERANCES = {name: Tolerance(atol=2e-2, rtol=2e-2) for name in ("dq", "dk", "dv")}
NAMES = ("dq", "dk", "dv")


def shapes(params: dict[str, Any]) -> tuple[tuple[int, ...], list[int] | None]:
    """The shape of Q, K, V and dO ([B, H, S, D] dense, [T, H, D] packed) and the THD lengths."""
    if params["layout"] == "thd":
        lens = [int(n) for n in params["lens"]]
        return (sum(lens), params["h"], params["d"]), lens
    return (params["b"], params["h"], params["s"], params["d"]), None


def cu_seqlens(lens: list[int], device: torch.device) -> torch.Tensor:
    """[0, l0, l0 + l1, ...] as int32: the offsets of the packed sequences."""
    offsets = [0]
    for n in lens:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


@dataclass
class SdpaTorchWorkload:
    config: Config
    device: torch.device
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(TOLERANCES))
    arms: Arms = field(default_factory=Arms)

    def __post_init__(self) -> None:
        import cudnn

        shape, self.lens = shapes(self.config.params)
        self.scale = 1.0 / math.sqrt(shape[-1])
        gen = seeded(20261205, self.device)

        def randn() -> torch.Tensor:
            return torch.randn(*shape, generator=gen, device=self.device).to(torch.bfloat16)

        self.q, self.k, self.v = (randn().requires_grad_() for _ in range(3))
        self.d_o = randn()
        self.kwargs: dict[str, Any] = {"is_causal": True, "return_lse": True}
        if self.lens is not None:
            cu = cu_seqlens(self.lens, self.device)
            self.kwargs.update(
                cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=max(self.lens),
                max_seqlen_kv=max(self.lens),
            )  # fmt: skip
        self.fn = cudnn.sdpa_torch

    def _once(self) -> dict[str, torch.Tensor]:
        leaves = (self.q, self.k, self.v)
        for t in leaves:
            t.grad = None
        out, _lse = self.fn(*leaves, **self.kwargs)
        out.backward(self.d_o)
        return {
            n: t.grad.detach() for n, t in zip(NAMES, leaves, strict=True) if t.grad is not None
        }

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        return self.arms.run(knob, self._once)

    def reference(self) -> dict[str, torch.Tensor]:
        q, k, v, d_o = (t.detach() for t in (self.q, self.k, self.v, self.d_o))
        if self.lens is None:
            return attention_reference(q, k, v, d_o, causal=True, scale=self.scale)
        parts: dict[str, list[torch.Tensor]] = {n: [] for n in NAMES}
        start = 0
        for n in self.lens:  # each sequence alone, [T, H, D] -> [1, H, T, D]
            one = [t[start : start + n].transpose(0, 1).unsqueeze(0) for t in (q, k, v, d_o)]
            grads = attention_reference(*one, causal=True, scale=self.scale)
            for name in NAMES:
                parts[name].append(grads[name][0].transpose(0, 1))
            start += n
        return {name: torch.cat(parts[name]) for name in NAMES}


class SdpaTorchBwd:
    name = "sdpa_torch_bwd"
    configs = CONFIGS

    def prepare(self, config: Config, device: torch.device) -> SdpaTorchWorkload:
        return SdpaTorchWorkload(config, device)


SUBJECT = SdpaTorchBwd()
