"""Does the frontend's FP8 SDPA backward run on this GPU, and does its knob change any byte?

``sdpa_fp8_backward`` takes ``use_deterministic_algorithm`` like the bf16 backward, but the
frontend is not known to read it for FP8 on sm_90. This builds the FP8 (e4m3) backward graph twice,
knob off and on, on the same inputs (Q, K, V, dO random, O and the softmax statistics computed in
float32 from the dequantised inputs, every scale 1.0), runs each ``--runs`` times and digests dQ,
dK and dV: how many distinct byte patterns each arm gave, and whether the arms' first runs are the
same bytes. A graph that the backend does not support here is reported with its error, not raised.

    python3 bench/sdpa_fp8_sm90.py [--b 2 --h 16 --s 4096 --d 128 --causal] [--runs 16] [--json OUT]

Needs a CUDA GPU and the frontend; prints one JSON document.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch

OUTPUTS = ("dQ", "dK", "dV")
SCALES = (
    *("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP"),
    *("scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP"),
)
AMAX = ("amax_dQ", "amax_dK", "amax_dV", "amax_dP")


def inputs(b: int, h: int, s: int, d: int, causal: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(20261205)
    dev, fp8 = "cuda", torch.float8_e4m3fn
    q, k, v, d_o = (torch.randn(b, h, s, d, generator=gen, device=dev) for _ in range(4))
    q8, k8, v8, do8 = (t.to(fp8) for t in (q, k, v, d_o))
    scores = (q8.float() @ k8.float().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        mask = torch.ones(s, s, dtype=torch.bool, device=dev).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    stats = torch.logsumexp(scores, dim=-1, keepdim=True)  # (b, h, s, 1), float32
    o = torch.softmax(scores, dim=-1) @ v8.float()
    return {"q": q8, "k": k8, "v": v8, "o": o.to(fp8), "dO": do8, "stats": stats.contiguous()}


def build(cudnn: Any, t: dict[str, torch.Tensor], d: int, causal: bool, knob: bool) -> Any:
    g = cudnn.pygraph(
        io_data_type=cudnn.data_type.FP8_E4M3,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
    )
    fp8, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    made = {
        name: g.tensor(
            name=name,
            dim=list(x.shape),
            stride=list(x.stride()),
            data_type=f32 if name == "stats" else fp8,
        )
        for name, x in t.items()
    }
    for name in SCALES:
        made[name] = g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
    outs = g.sdpa_fp8_backward(
        **made,
        attn_scale=1.0 / math.sqrt(d),
        use_causal_mask=causal,
        use_deterministic_algorithm=knob,
    )
    shape, stride = list(t["q"].shape), list(t["q"].stride())
    for name, out in zip((*OUTPUTS, *AMAX), outs, strict=True):
        if name in OUTPUTS:
            out.set_output(True).set_dim(shape).set_stride(stride).set_data_type(fp8)
        else:
            out.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
        made[name] = out
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, made


def digest(x: torch.Tensor) -> str:
    return hashlib.sha256(x.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def arm(cudnn: Any, t: dict[str, torch.Tensor], args: argparse.Namespace, knob: bool) -> dict:
    started = time.perf_counter()
    try:
        g, made = build(cudnn, t, args.d, args.causal, knob)
    except Exception as exc:  # not supported here: the finding is the message
        return {"knob": knob, "error": f"{type(exc).__name__}: {exc}"[:800]}
    built_s = time.perf_counter() - started
    one = torch.ones(1, 1, 1, 1, dtype=torch.float32, device="cuda")
    out = {name: torch.empty_like(t["q"]) for name in OUTPUTS}
    amax = {n: torch.empty_like(one) for n in AMAX}
    pack = {made[n]: x for n, x in t.items()}
    pack.update({made[n]: one for n in SCALES})
    pack.update({made[n]: x for n, x in {**out, **amax}.items()})
    workspace = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device="cuda")
    digests: dict[str, list[str]] = {n: [] for n in OUTPUTS}
    times = []
    for _ in range(args.runs):
        for x in out.values():
            x.view(torch.uint8).zero_()
        torch.cuda.synchronize()
        began = time.perf_counter()
        g.execute(pack, workspace)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
        for n in OUTPUTS:
            digests[n].append(digest(out[n]))
    finite = {n: bool(torch.isfinite(out[n].float()).all()) for n in OUTPUTS}
    return {
        "knob": knob,
        "built_s": round(built_s, 3),
        "runs": args.runs,
        "run_median_ms": round(statistics.median(times) * 1e3, 3),
        "distinct": {n: len(set(v)) for n, v in digests.items()},
        "differing_from_run_0": {n: sum(x != v[0] for x in v[1:]) for n, v in digests.items()},
        "first": {n: v[0] for n, v in digests.items()},
        "finite": finite,
        "nonzero": {n: int(torch.count_nonzero(out[n].float())) for n in OUTPUTS},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("b", 2), ("h", 16), ("s", 4096), ("d", 128), ("runs", 16)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import cudnn

    doc: dict[str, Any] = {
        "frontend": getattr(cudnn, "__version__", "?"),
        "backend": cudnn.backend_version(),
        "gpu": torch.cuda.get_device_name(),
        "config": {k: getattr(args, k) for k in ("b", "h", "s", "d", "causal")},
    }
    t = inputs(args.b, args.h, args.s, args.d, args.causal)
    doc["arms"] = [arm(cudnn, t, args, knob) for knob in (False, True)]
    ran = [a for a in doc["arms"] if "first" in a]
    if len(ran) == 2:
        doc["arms_same_bytes"] = {n: ran[0]["first"][n] == ran[1]["first"][n] for n in OUTPUTS}
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
