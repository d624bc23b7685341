"""Hold ``dsa_indexer_bwd``'s float32 reference against the kernel where the kernel runs: sm_90.

The subject's knob runs only on sm_100, but the frontend's indexer backward with the knob off runs
on sm_90 (``indexer_backward_sm90``, the same math: the gradient signal of the KL loss, then the
GEMMs through the logits). This runs the subject's own workload there with the knob off ``--runs``
times at a config and reports, per output: how many runs differed from the first in bytes (the
control the subject would see), and the largest fraction of the declared tolerance the kernel's
output used against ``indexer_reference`` (1.0 is the bound; a wrong reference reads far above).
It also asks for ``deterministic=True``, which the frontend owes a ``ValueError`` on sm_90.

    python3 bench/indexer_reference_sm90.py [--config NAME|all] [--runs 8] [--json OUT]

``all`` (the default) measures every declared config the sm_90 kernel takes (it asserts 64 heads
or more). Needs a CUDA GPU of sm_90 and frontend 1.32.0; prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from runner.inside.arms import digest
from runner.inside.subjects import dsa_indexer_bwd


def measure(config_name: str, runs: int) -> dict[str, Any]:
    device = torch.device("cuda")
    config = {c.name: c for c in dsa_indexer_bwd.CONFIGS}[config_name]
    work = dsa_indexer_bwd.SUBJECT.prepare(config, device)
    start = time.perf_counter()
    first = work.run(False)
    torch.cuda.synchronize()
    out: dict[str, Any] = {
        "config": config.describe(),
        "gpu": torch.cuda.get_device_name(),
        "first_run_s": round(time.perf_counter() - start, 3),
    }
    digests = {name: [digest(t)] for name, t in first.items()}
    for _ in range(runs - 1):
        for name, t in work.run(False).items():
            digests[name].append(digest(t))
    ref = work.reference()
    outputs = {}
    for name, tol in work.tolerances.items():
        got, want = first[name].float(), ref[name]
        bound = tol.atol + tol.rtol * want.abs()
        outputs[name] = {
            "runs_differing": sum(d != digests[name][0] for d in digests[name][1:]),
            "distinct": len(set(digests[name])),
            "finite": bool(torch.isfinite(got).all()),
            "max_abs_err": float((got - want).abs().max()),
            "max_abs_ref": float(want.abs().max()),
            "bound_used": float(((got - want).abs() / bound).max()),
            "outside": int(((got - want).abs() > bound).sum()),
        }
    out["runs"] = runs
    out["knob_off"] = outputs
    try:
        work.run(True)
        out["knob_on"] = "ran (the frontend owes a ValueError on sm_90)"
    except ValueError as exc:
        out["knob_on"] = f"ValueError: {str(exc)[:300]}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="all")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configs = {c.name: c for c in dsa_indexer_bwd.CONFIGS}
    doc: dict[str, Any] = {"configs": []}
    for name in configs if args.config == "all" else [args.config]:
        if configs[name].params["h"] < 64:
            skipped = {"config": name, "skipped": "the sm_90 kernel takes 64 heads or more"}
            doc["configs"].append(skipped)
            continue
        doc["configs"].append(measure(name, max(2, args.runs)))
        torch.cuda.empty_cache()
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
