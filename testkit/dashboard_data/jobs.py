"""The jobs a finished build is made of: a CPU job (install, probe, the refusal table) and a GPU
job per family (determinism results by subject, numerics), with the stages and checks runners
report for them."""

from __future__ import annotations

from core.subjects import SUBJECTS
from testkit.dashboard_data.rows import B200_ENV, CPU_ENV, ENTRY, GPU_ENV, Ctx

CPU_STAGES = ["install", "probe", "refusal"]
GPU_STAGES = ["install", "probe", "determinism", "numerics", "refusal"]
PROBE_CHECKS = [(f"{s}.knob", "pass", "found by the probe") for s in ENTRY]
REFUSAL_CHECKS = [
    ("grouped_gemm_dsrelu.refusal", "pass", "40 rows as the contract says"),
    ("grouped_gemm_dglu.refusal", "pass", "40 rows as the contract says"),
    ("refusal.state_restored", "pass", "the variable and the torch flag were restored"),
]


def cpu_job(c: Ctx, b: int, *, refusal: bool = True, broken: int = 0) -> int:
    j = c.job(b, "cpu", None, CPU_STAGES, "finished", runner="ci-cpu-1", env=CPU_ENV)
    c.stage(
        j,
        "install",
        "pass",
        "installed with its declared dependencies",
        duration=11.5 + c.variant % 5,
    )
    c.stage(j, "probe", "pass", "4 subjects probed", duration=2.1, checks=PROBE_CHECKS)
    if refusal:
        status = "fail" if broken else "pass"
        checks = list(REFUSAL_CHECKS)
        if broken:
            checks[0] = (
                "grouped_gemm_dsrelu.refusal",
                "fail",
                f"{broken} rows passed the knob as False",
            )
        c.stage(j, "refusal", status, "80 rows", duration=3.4, checks=checks)
        c.refusal(b, j, broken=broken)
    return j


def gpu_job(
    c: Ctx,
    b: int,
    family: str,
    results: dict[str, tuple[str, str]],
    *,
    determinism: str | None = None,
    reason: str = "",
    numerics: str = "pass",
    numerics_reason: str = "within tolerance of a float32 reference",
    log: str = "",
) -> int:
    env = B200_ENV if family == "sm_100" else GPU_ENV
    runner = "b200-old" if family == "sm_100" else "h200-a"
    j = c.job(b, "gpu", family, GPU_STAGES, "finished", runner=runner, env=env)
    c.stage(j, "install", "pass", "installed", duration=14.0 + c.variant % 3)
    c.stage(j, "probe", "pass", "4 subjects probed", duration=2.3, checks=PROBE_CHECKS)
    checks = [(f"{s}.deterministic", st, detail) for s, (st, detail) in results.items()]
    covered = [st for st, _ in results.values() if st not in ("skipped", "not_applicable")]
    status = determinism or next(
        (x for x in ("fail", "error", "inconclusive", "pass") if x in covered), "skipped"
    )
    c.stage(
        j,
        "determinism",
        status,
        reason or "; ".join(f"{n} {st}" for n, st, _ in checks),
        duration=95.0 + 7 * (c.variant % 6),
        checks=checks,
        log=log,
    )
    c.stage(j, "numerics", numerics, numerics_reason, duration=6.2)
    c.stage(j, "refusal", "pass", "80 rows", duration=3.9, checks=REFUSAL_CHECKS)
    return j


PASS = ("pass", "bit-exact over 24 runs; control varied in 9 of 15; luck 7e-4 < 1e-3")
NEEDS_SM100 = ("skipped", "needs sm_100")
NEEDS_BACKEND = (
    "skipped",
    "not covered: needs a newer cuDNN backend (9.20.0; this host has 9.19.0)",
)


def covered(family: str, results: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """``results``, and every other subject of ``family`` passing: a finished job reports each
    subject its family runs, so a subject added to the registry is not left as one that did not
    run (which would make a passing build incomplete)."""
    rest = {n: PASS for n, s in SUBJECTS.items() if family in s.families and n not in results}
    return {**results, **rest}


def sm90_results(
    flex: tuple[str, str] = PASS, sdpa: tuple[str, str] = PASS
) -> dict[str, tuple[str, str]]:
    return covered(
        "sm_90",
        {
            "grouped_gemm_dsrelu": NEEDS_SM100,
            "grouped_gemm_dglu": NEEDS_SM100,
            "flex_attention_bwd": flex,
            "sdpa_bwd": sdpa,
            "sdpa_torch_bwd": sdpa,
            "causal_conv1d_bwd": NEEDS_BACKEND,
        },
    )
