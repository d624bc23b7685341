"""The determinism surface of a frontend build, measured on this GPU entry point by entry point.

    python bench/gpu_surface.py [--sections a,b,...] [--runs 12] [--budget-s 420]
        [--section-s 120] [--out FILE.json]
    python bench/gpu_surface.py --list

For each entry point with a determinism knob that can run here, a control arm (knob off: how many
of ``--runs`` runs differ from run 0 by bytes, the largest |d|), the deterministic arm (knob on:
bit-exact?), and the refusals the frontend owes (an entry point that must raise where it cannot
honour the knob). Where the knob is ``torch.use_deterministic_algorithms`` the flag is set around
each run and put back after it; ``warn_only=True`` is an arm of its own. Each measurement is timed,
and one that raises records the exception's type and message instead; the whole is bounded by
``--budget-s`` and each section by ``--section-s``. Prints a JSON document (also written to
``--out``) and a readable summary on stderr.

Sections here: the SDPA family (``cudnn.sdpa_torch`` through autograd, ``torch.ops.cudnn.sdpa_bwd``,
``pygraph.sdpa_backward`` with GQA and dBias, ``pygraph.sdpa_fp8_backward``); the rest
(causal conv1d, DeepSeek sparse attention, indexer top-k, flex attention) are in
bench/gpu_surface_more.py. Standard library, torch, the frontend and the checkout's float32
attention references (``runner/inside/subjects/attention.py``) only.

On a GPU host without a registry (Python 3.12): the frontend wheel (about 12 MB) installs with
``pip install --no-index --no-deps --target DIR`` and ``PYTHONPATH=DIR``; the CuTe DSL sections
also need nvidia-cutlass-dsl 4.8.1 with its libs-base and libs-cu13 wheels (libs-cu13 is 92 MB,
so it travels in parts over back-to-back calls) and ``DIR/nvidia_cutlass_dsl/dsl_packages`` on
``PYTHONPATH`` (``--target`` does not run the package's .pth file). The script and the wheels must
be in the checkout that the host receives.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # the float32 references use cuBLAS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from bench import gpu_surface_graph as graph
from bench import gpu_surface_more as more
from bench.gpu_surface_kit import (
    Ctx,
    Deadline,
    Outputs,
    arms,
    attention_reference,
    flag_arms,
    record,
    record_error,
)

DENSE = {
    "b4_h16_s2048_d128_causal": (4, 16, 2048, 128),
    "b4_h32_s4096_d128_causal": (4, 32, 4096, 128),
}
THD_LENS = (1024, 1536, 512, 2048)  # ragged: four sequences, total 5120 tokens
SEED = 20261205


def thd_inputs(ctx: Ctx, h: int, d: int) -> tuple[list[torch.Tensor], torch.Tensor, int]:
    total = sum(THD_LENS)
    cu = torch.tensor(
        [0, *torch.tensor(THD_LENS).cumsum(0).tolist()], dtype=torch.int32, device=ctx.device
    )
    return [ctx.randn(total, h, d, seed=SEED + i) for i in range(4)], cu, max(THD_LENS)


def sec_sdpa_torch(ctx: Ctx) -> None:
    """``cudnn.sdpa_torch`` forward + backward through autograd; the knob is the torch flag."""
    import cudnn

    ep = "cudnn.sdpa_torch (autograd backward)"
    for cfg, (b, h, s, d) in DENSE.items():
        q, k, v, d_o = (ctx.randn(b, h, s, d, seed=SEED + i) for i in range(4))
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]

        def run(leaves: list[torch.Tensor] = leaves, d_o: torch.Tensor = d_o) -> Outputs:
            for t in leaves:
                t.grad = None
            o, _ = cudnn.sdpa_torch(*leaves, is_causal=True, return_lse=True)
            o.backward(d_o)
            return {n: t.grad for n, t in zip(("dq", "dk", "dv"), leaves, strict=True)}  # type: ignore[misc]

        ref = attention_reference(q, k, v, d_o, causal=True, scale=d**-0.5) if s <= 2048 else None
        flag_arms(ctx, ep, cfg, run, ref)
    (q, k, v, d_o), cu, m = thd_inputs(ctx, 16, 128)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]

    def run_thd() -> Outputs:
        for t in leaves:
            t.grad = None
        o, _ = cudnn.sdpa_torch(
            *leaves,
            is_causal=True,
            cu_seqlens_q=cu,
            cu_seqlens_kv=cu,
            max_seqlen_q=m,
            max_seqlen_kv=m,
            return_lse=True,
        )
        o.backward(d_o)
        return {n: t.grad for n, t in zip(("dq", "dk", "dv"), leaves, strict=True)}  # type: ignore[misc]

    flag_arms(ctx, ep, "thd_lens1024-1536-512-2048_h16_d128_causal", run_thd, None)


def sec_sdpa_bwd_op(ctx: Ctx) -> None:
    """``torch.ops.cudnn.sdpa_bwd(..., is_deterministic=)`` called directly: dense, GQA, THD."""
    import cudnn.sdpa.fwd.torch_op as op_mod

    ep = "torch.ops.cudnn.sdpa_bwd"
    ops = torch.ops.cudnn
    for cfg, (b, h, h_kv, s, d) in {
        "b4_h16_s2048_d128_causal": (4, 16, 16, 2048, 128),
        "gqa_b4_h16_hkv4_s2048_d128_causal": (4, 16, 4, 2048, 128),
    }.items():
        q, d_o = ctx.randn(b, h, s, d, seed=SEED), ctx.randn(b, h, s, d, seed=SEED + 3)
        k, v = ctx.randn(b, h_kv, s, d, seed=SEED + 1), ctx.randn(b, h_kv, s, d, seed=SEED + 2)
        scale = d**-0.5
        try:
            with torch.no_grad():
                o, lse = ops.sdpa_fwd(q, k, v, scale, is_causal=True, return_lse=True)
        except Exception as exc:
            record_error(ctx.results, ep, cfg, "forward", exc)
            continue

        def run(knob: bool, q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, scale=scale) -> Outputs:  # type: ignore[no-untyped-def]
            dq, dk, dv = ops.sdpa_bwd(
                d_o, q, k, v, o, lse, scale, is_causal=True, is_deterministic=knob
            )
            return {"dq": dq, "dk": dk, "dv": dv}

        ref = attention_reference(q, k, v, d_o, causal=True, scale=scale)
        arms(ctx, ep, cfg, run, ref)
    (q, k, v, d_o), cu, m = thd_inputs(ctx, 16, 128)
    scale = 128**-0.5
    thd = {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "max_seqlen_q": m, "max_seqlen_kv": m}
    try:
        with torch.no_grad():
            o, lse = ops.sdpa_fwd(q, k, v, scale, is_causal=True, return_lse=True, **thd)
        lse_padded = op_mod.thd_lse_to_padded(lse[:, :, 0], cu, m)
    except Exception as exc:
        record_error(ctx.results, ep, "thd", "forward", exc)
        return

    def run_thd(knob: bool) -> Outputs:
        dq, dk, dv = ops.sdpa_bwd(
            d_o, q, k, v, o, lse_padded, scale, is_causal=True, is_deterministic=knob, **thd
        )
        return {"dq": dq, "dk": dk, "dv": dv}

    arms(ctx, ep, "thd_lens1024-1536-512-2048_h16_d128_causal", run_thd, None)


SECTIONS: dict[str, Callable[[Ctx], None]] = {
    "sdpa_torch": sec_sdpa_torch,
    "sdpa_bwd_op": sec_sdpa_bwd_op,
    **graph.SECTIONS,
    **more.SECTIONS,
}


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["capability"] = list(torch.cuda.get_device_capability())
        env["torch_cudnn"] = torch.backends.cudnn.version()
    try:
        import cudnn

        env["frontend"] = getattr(cudnn, "__version__", None)
        env["frontend_path"] = str(Path(cudnn.__file__).parent)
        env["cudnn_backend"] = cudnn.backend_version()
    except Exception as exc:
        env["frontend_error"] = f"{type(exc).__name__}: {exc}"[:400]
    env["cute_dsl"] = importlib.util.find_spec("cutlass") is not None
    return env


def clean(x: Any) -> Any:
    """JSON-safe: a NaN or infinite float becomes its name as a string."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    return x


def summary(doc: dict[str, Any]) -> str:
    lines = [f"env: {json.dumps(doc['environment'])}"]
    for r in doc["results"]:
        head = f"{r['entry_point']} | {r['config']} | {r['arm']} | {r['seconds']} s"
        if "error" in r:
            lines.append(f"{head} | ERROR {r['error']['type']}: {r['error']['message'][:160]}")
        elif "runs" in r:
            outs = ", ".join(
                f"{n} {o['runs_differing']} max|d| {o['max_abs_diff']}"
                for n, o in r["outputs"].items()
            )
            lines.append(
                f"{head} | {r['runs_differing']}/{max(r['runs'] - 1, 0)} runs differ ({outs})"
            )
        else:
            rest = {
                k: v for k, v in r.items() if k not in ("entry_point", "config", "arm", "seconds")
            }
            lines.append(f"{head} | {json.dumps(clean(rest))[:300]}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated; --list names them"
    )
    p.add_argument("--runs", type=int, default=12, help="runs per arm (2-64)")
    p.add_argument("--budget-s", type=float, default=420.0, help="the whole run's time limit")
    p.add_argument("--section-s", type=float, default=120.0, help="one section's time limit")
    p.add_argument("--out", type=Path, help="also write the JSON document here")
    p.add_argument("--list", action="store_true", help="name the sections and exit")
    args = p.parse_args(argv)
    wanted = [s for s in args.sections.split(",") if s]
    unknown = [s for s in wanted if s not in SECTIONS]
    if unknown or not wanted:
        p.error(f"unknown or no sections {unknown}; known: {', '.join(SECTIONS)}")
    if not 2 <= args.runs <= 64:
        p.error("--runs must be between 2 and 64")
    if args.budget_s <= 0 or args.section_s <= 0:
        p.error("--budget-s and --section-s must be positive")
    args.wanted = wanted
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        print(
            "\n".join(
                f"{n}: {(f.__doc__ or '').strip().splitlines()[0]}" for n, f in SECTIONS.items()
            )
        )
        return 0
    doc: dict[str, Any] = {"environment": environment(), "runs_per_arm": args.runs, "results": []}
    if not torch.cuda.is_available():
        doc["skipped"] = "no CUDA device"
    else:
        overall = Deadline(args.budget_s)
        for name in args.wanted:
            if overall.passed():
                doc["results"].append(
                    {
                        "entry_point": name,
                        "config": "-",
                        "arm": "-",
                        "seconds": 0,
                        "error": {"type": "Skipped", "message": "whole budget spent"},
                    }
                )
                continue
            ctx = Ctx(doc["results"], args.runs, Deadline(min(args.section_s, overall.left())))
            t0 = time.monotonic()
            record(
                doc["results"],
                name,
                "-",
                "section",
                lambda name=name, ctx=ctx: SECTIONS[name](ctx) or {},
            )
            doc.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 2)
            torch.cuda.empty_cache()
            if args.out:  # written after every section: a run killed at its limit keeps the rest
                args.out.write_text(json.dumps(clean(doc), indent=1) + "\n")
    text = json.dumps(clean(doc), indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print(summary(clean(doc)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
