"""The numerics stage's checks: the deterministic arm's first run against a float32 reference.

Each output is compared elementwise, ``|x - ref| <= atol + rtol * |ref|``, with the tolerances the
subject states for it; an output that is not finite fails. Standard library and torch only.
"""

from __future__ import annotations

import math

import torch

from runner.inside.arms import Arm
from runner.inside.documents import CheckDoc
from runner.inside.subjects.base import Config, Workload


def check_numerics(subject: str, workload: Workload, det: Arm, config: Config) -> list[CheckDoc]:
    """One ``<subject>.<output>`` check per output of the deterministic arm's first run."""
    ref = workload.reference()
    checks: list[CheckDoc] = []
    for name, got in det.first.items():
        tol = workload.tolerances[name]
        want = ref[name].to(device=got.device, dtype=torch.float32)
        x = got.to(torch.float32)
        err = (x - want).abs()
        bound = tol.atol + tol.rtol * want.abs()
        finite = bool(torch.isfinite(x).all())
        ok = finite and bool((err <= bound).all())
        max_err = (
            float(err[torch.isfinite(err)].max()) if bool(torch.isfinite(err).any()) else math.nan
        )
        worst = float((err / bound).nan_to_num(math.inf).max()) if err.numel() else 0.0
        checks.append(
            {
                "name": f"{subject}.{name}",
                "status": "pass" if ok else "fail",
                "detail": (
                    f"{'within' if ok else 'outside'} |x - ref| <= {tol.atol:g} + "
                    f"{tol.rtol:g}*|ref| vs a float32 reference: max |err| {max_err:.3g}, "
                    f"worst err/bound {worst:.3g}" + ("" if finite else "; output not finite")
                ),
                "metrics": {  # JSON has no NaN or inf: a non-finite figure is null
                    "max_abs_err": max_err if math.isfinite(max_err) else None,
                    "worst_ratio": worst if math.isfinite(worst) else None,
                    "ref_max_abs": float(want.abs().max()) if want.numel() else 0.0,
                    "atol": tol.atol,
                    "rtol": tol.rtol,
                    "config": config.describe(),
                },
            }
        )
    return checks
