"""PyTorch's own SDPA on the cuDNN Python API (``cudnn.torch``): which flag modes reach its
backward, and what the bytes do there. The investigation before a subject of it.

``cudnn.torch.install()`` (1.29.0 on) serves ``aten::_scaled_dot_product_cudnn_attention`` and
its backward from the frontend; the backward, ``cudnn.torch.sdpa_provider._bwd``, passes
``is_deterministic=torch.are_deterministic_algorithms_enabled()``: the path a plain PyTorch user
takes with ``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])``. But PyTorch's backend selection
(``check_cudnn_deterministic`` in ``sdp_utils.cpp``) rules cuDNN attention out under strict
deterministic algorithms, before the override is reached: read from the source, not yet seen on
a GPU. For each flag mode (``off``, ``warn_only``, ``on``) and each choice of backends (cuDNN
alone, every backend), this runs forward and backward ``--runs`` times on the same inputs
(bf16, causal, BHSD) and records: whether it raised (and what), how many calls the provider's
forward and backward served (its ``calls`` counters: ``bwd`` on the Python API, ``bwd_cpp`` the
C++ fallback; zero means another backend ran), the distinct byte patterns of dQ, dK, dV and how
many runs differed from the first, and the largest fraction of sdpa_torch_bwd's tolerance the
first run used against the float32 reference.

    python3 bench/sdpa_provider_sm90.py [--b 4 --h 16 --s 2048 --d 128] [--runs 8] [--json OUT]

Needs a CUDA GPU and frontend 1.29.0 or later; prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch

from runner.inside.arms import digest
from runner.inside.subjects.attention import attention_reference
from runner.inside.subjects.base import tolerances_of
from runner.inside.subjects.sdpa_torch_bwd import DECLARATION
from runner.inside.torchflag import flag

MODES = ("off", "warn_only", "on")
NAMES = ("dq", "dk", "dv")


def _inputs(b: int, h: int, s: int, d: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(20261205)

    def randn() -> torch.Tensor:
        return torch.randn(b, h, s, d, generator=gen, device="cuda").to(torch.bfloat16)

    q, k, v, d_o = (randn() for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), d_o


def _arm(
    leaves: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    d_o: torch.Tensor,
    mode: str,
    backends: list[Any],
    runs: int,
    calls: dict[str, int],
    ref: dict[str, torch.Tensor],
) -> dict[str, Any]:
    from torch.nn.attention import sdpa_kernel

    before = dict(calls)
    digests: dict[str, list[str]] = {n: [] for n in NAMES}
    first: dict[str, torch.Tensor] = {}
    out: dict[str, Any] = {"mode": mode}
    try:
        for _ in range(runs):
            for t in leaves:
                t.grad = None
            with flag(mode), sdpa_kernel(backends):
                q, k, v = leaves
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                o.backward(d_o)
            for name, t in zip(NAMES, leaves, strict=True):
                assert t.grad is not None
                digests[name].append(digest(t.grad))
                first.setdefault(name, t.grad.detach().clone())
    except Exception as exc:  # what the mode does is the finding
        out["raised"] = f"{type(exc).__name__}: {str(exc)[:400]}"
    out["served"] = {k: calls[k] - before.get(k, 0) for k in calls}
    out["outputs"] = {}
    tolerances = tolerances_of(DECLARATION)
    for name in NAMES:
        seen = digests[name]
        if not seen:
            continue
        tol = tolerances[name]
        err = (first[name].float() - ref[name]).abs()
        out["outputs"][name] = {
            "runs": len(seen),
            "distinct": len(set(seen)),
            "runs_differing": sum(x != seen[0] for x in seen[1:]),
            "bound_used": float((err / (tol.atol + tol.rtol * ref[name].abs())).max()),
        }
    return out


def measure(b: int, h: int, s: int, d: int, runs: int) -> dict[str, Any]:
    import cudnn
    import cudnn.torch
    from cudnn.torch import sdpa_provider
    from torch.nn.attention import SDPBackend

    cudnn.torch.install()
    q_, k_, v_, d_o = _inputs(b, h, s, d)
    leaves = (q_, k_, v_)
    q, k, v = (t.detach() for t in leaves)
    ref = attention_reference(q, k, v, d_o, causal=True, scale=1.0 / math.sqrt(d))
    doc: dict[str, Any] = {
        "frontend": cudnn.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "config": {"b": b, "h": h, "s": s, "d": d, "dtype": "bf16", "causal": True},
        "arms": [],
    }
    every = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
             SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]  # fmt: skip
    for label, backends in (("cudnn_only", [SDPBackend.CUDNN_ATTENTION]), ("any", every)):
        for mode in MODES:
            arm = _arm(leaves, d_o, mode, backends, runs, sdpa_provider.calls, ref)
            doc["arms"].append({"backends": label, **arm})
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("b", 4), ("h", 16), ("s", 2048), ("d", 128), ("runs", 8)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    doc = measure(args.b, args.h, args.s, args.d, max(2, args.runs))
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
