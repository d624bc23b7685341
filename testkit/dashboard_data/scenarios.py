"""One build per state the dashboard shows: pass, fail, inconclusive, incomplete, error, timeout,
crashed, cancelled, not applicable, waiting for a runner, a commit being built, pending, running,
and one whose every text field carries markup (shown as text, never run)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta

from testkit.dashboard_data.jobs import (
    CPU_STAGES,
    GPU_STAGES,
    PASS,
    PROBE_CHECKS,
    covered,
    cpu_job,
    gpu_job,
    sm90_results,
)
from testkit.dashboard_data.rows import CPU_ENV, Ctx

XSS_VERSION = "<script>window.__xss = 1</script>9.9.9"
XSS_BRANCH = "refs/heads/<b>bold</b>"


def scenario_pass(c: Ctx) -> int:
    b = c.build(version="1.32.0")
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    g = gpu_job(c, b, "sm_90", sm90_results())
    control = 5 + (c.variant * 3) % 11
    c.drift(b, g, "sm_90", "sdpa_bwd", control=control)
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=min(15, control + 3))
    h = gpu_job(
        c,
        b,
        "sm_100",
        covered("sm_100", {}),
    )
    c.drift(b, h, "sm_100", "grouped_gemm_dsrelu", control=12, outputs=("dprob", "dbias"))
    c.drift(b, h, "sm_100", "grouped_gemm_dglu", control=10, outputs=("dprob",))
    c.finding(
        b,
        cpu,
        "default_ignores_torch_flag",
        "info",
        "grouped_gemm_dglu",
        "the knob defaults to False and ignores torch.use_deterministic_algorithms",
    )
    return b


def scenario_fail(c: Ctx) -> int:
    b = c.build(
        source="commit",
        version="1.29.0",
        sha256=None,
        filename="nvidia_cudnn_frontend-1.29.0-cp311-linux_x86_64.whl",
        repo="https://github.com/NVIDIA/cudnn-frontend.git",
        commit=hashlib.sha1(f"fail{c.variant}".encode()).hexdigest(),
        branch="refs/heads/develop",
        message="flex attention: new backward tiling",
    )
    bj = c.job(b, "build", None, ["build"], "finished", runner="builder-1")
    c.stage(bj, "build", "pass", "wheel built", duration=410.0)
    cpu = cpu_job(c, b, broken=2)
    c.caps(b, cpu)
    fail = ("fail", "deterministic arm varied: 3 of 24 runs differ from run 0, max |d| 1.2e-4")
    g = gpu_job(c, b, "sm_90", sm90_results(flex=fail), numerics="pass")
    c.drift(
        b,
        g,
        "sm_90",
        "flex_attention_bwd",
        control=6,
        det_differing=3,
        luck=None,
        stopped_by="max_repeats",
    )
    c.drift(b, g, "sm_90", "sdpa_bwd", control=9)
    c.finding(
        b,
        cpu,
        "feature_regression",
        "error",
        "grouped_gemm_dsrelu",
        "grouped_gemm_dsrelu_wrapper_sm100 lost 'deterministic' since build of 1.28.0",
    )
    c.finding(
        b,
        cpu,
        "feature_predates_version",
        "warning",
        "flex_attention_bwd",
        "reports 1.28.0 but flex_attn_func already takes 'deterministic'",
    )
    return b


def scenario_inconclusive(c: Ctx) -> int:
    b = c.build(version="1.31.0")
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    never = (
        "inconclusive",
        "the control never varied in 16 runs at b1_h8_s512_d64: nothing to certify",
    )
    g = gpu_job(c, b, "sm_90", sm90_results(sdpa=never))
    c.drift(b, g, "sm_90", "sdpa_bwd", control=0, luck=1.0, stopped_by="max_repeats")
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=6)
    return b


def scenario_incomplete(c: Ctx) -> int:
    b = c.build(version="1.30.0")
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    g = gpu_job(c, b, "sm_90", sm90_results())
    c.drift(b, g, "sm_90", "sdpa_bwd", control=7)
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=11)
    c.job(
        b,
        "gpu",
        "sm_100",
        GPU_STAGES,
        "finished",
        reason="skipped: no sm_100 runner",
        outcome="skipped",
    )
    c.finding(
        b,
        cpu,
        "consumer_gap",
        "warning",
        "grouped_gemm_dglu",
        "the build offers 'deterministic' but the consumer still refuses swiglu",
    )
    return b


def scenario_error(c: Ctx) -> int:
    b = c.build(version="1.32.0", filename="nvidia_cudnn_frontend-1.32.0-cp311-linux_x86_64.whl")
    j = c.job(b, "cpu", None, CPU_STAGES, "finished", runner="ci-cpu-1", env=CPU_ENV)
    c.stage(
        j,
        "install",
        "error",
        "ResolutionImpossible: nvidia-cutlass-dsl==4.5.0 conflicts with the host",
        duration=8.0,
        log=(
            "ERROR: Cannot install nvidia-cudnn-frontend because these package versions "
            "have conflicting dependencies.\n"
        ),
    )
    c.stage(j, "probe", "skipped", "not run: install failed", duration=0.0)
    c.stage(j, "refusal", "skipped", "not run: install failed", duration=0.0)
    return b


def scenario_timeout(c: Ctx) -> int:
    b = c.build(version="1.32.0")
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    hang = ("timeout", "no result after 1800 s; the process group was killed")
    gpu_job(
        c,
        b,
        "sm_90",
        sm90_results(flex=hang, sdpa=PASS),
        determinism="timeout",
        reason="killed after 1800 s",
        numerics="skipped",
        numerics_reason="not run: determinism timed out",
        log="sdpa_bwd: pass at b4_h16_s2048_causal\nflex_attention_bwd: compiling...\n",
    )
    return b


def scenario_crashed(c: Ctx) -> int:
    b = c.build(version="1.32.0")
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    g = gpu_job(
        c,
        b,
        "sm_90",
        sm90_results(),
        numerics="crashed",
        numerics_reason="killed by signal 11 (SIGSEGV)",
    )
    c.drift(b, g, "sm_90", "sdpa_bwd", control=8)
    return b


def scenario_cancelled(c: Ctx) -> int:
    b = c.build(version="1.32.0", cancelled_at=c.now - timedelta(minutes=10))
    c.job(b, "cpu", None, CPU_STAGES, "cancelled", reason="cancelled")
    c.job(b, "gpu", "sm_90", GPU_STAGES, "cancelled", reason="cancelled")
    return b


def scenario_pending(c: Ctx) -> int:
    b = c.build(version="1.32.0", created_at=c.now - timedelta(minutes=1))
    c.job(b, "cpu", None, CPU_STAGES, "queued")
    return b


def scenario_running(c: Ctx) -> int:
    b = c.build(version="1.32.0", created_at=c.now - timedelta(minutes=3))
    j = c.job(b, "cpu", None, CPU_STAGES, "leased", runner="ci-cpu-1")
    c.stage(j, "install", "pass", "installed", duration=12.0)
    g = c.job(b, "gpu", "sm_90", GPU_STAGES, "leased", runner="h200-a")
    c.stage(g, "install", "pass", "installed", duration=14.0)
    c.stage(g, "probe", "pass", "4 subjects probed", duration=2.2, checks=PROBE_CHECKS)
    return b


def scenario_waiting(c: Ctx) -> int:
    b = c.build(version="1.32.0", created_at=c.now - timedelta(minutes=8))
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    c.job(b, "gpu", "sm_100", GPU_STAGES, "queued")
    return b


def scenario_not_applicable(c: Ctx) -> int:
    b = c.build(version="1.26.0")
    cpu = cpu_job(c, b)
    c.caps(
        b,
        cpu,
        absent={
            "flex_attention_bwd": "ModuleNotFoundError: No module named 'cudnn.flex_attention'",
            "grouped_gemm_dsrelu": None,
            "grouped_gemm_dglu": None,
        },
    )
    g = gpu_job(
        c,
        b,
        "sm_90",
        {
            "grouped_gemm_dsrelu": (
                "not_applicable",
                "this build's wrapper has no 'deterministic'",
            ),
            "grouped_gemm_dglu": ("not_applicable", "this build's wrapper has no 'deterministic'"),
            "flex_attention_bwd": (
                "not_applicable",
                "cudnn.flex_attention.flex_attn_func is not importable",
            ),
            "sdpa_bwd": PASS,
        },
    )
    c.drift(b, g, "sm_90", "sdpa_bwd", control=9)
    c.finding(
        b,
        cpu,
        "import_error",
        "warning",
        "flex_attention_bwd",
        "ModuleNotFoundError: No module named 'cudnn.flex_attention'",
    )
    return b


def scenario_commit_building(c: Ctx) -> int:
    b = c.build(
        source="commit",
        version=None,
        sha256=None,
        filename=None,
        repo="https://github.com/NVIDIA/cudnn-frontend.git",
        commit=hashlib.sha1(f"building{c.variant}".encode()).hexdigest(),
        branch="refs/heads/develop",
        message="Bump version to 1.33.0",
        created_at=c.now - timedelta(minutes=2),
    )
    c.job(b, "build", None, ["build"], "leased", runner="builder-1")
    c.job(b, "cpu", None, CPU_STAGES, "waiting")
    return b


def scenario_xss(c: Ctx) -> int:
    b = c.build(
        source="commit",
        version=XSS_VERSION,
        sha256=None,
        filename="<i>evil</i>.whl",
        repo="https://github.com/NVIDIA/cudnn-frontend.git",
        commit=hashlib.sha1(f"xss{c.variant}".encode()).hexdigest(),
        branch=XSS_BRANCH,
        message='<img src=x onerror="window.__xss = 2">',
    )
    cpu = cpu_job(c, b)
    c.caps(b, cpu)
    c.finding(
        b,
        cpu,
        "version_feature_mismatch",
        "error",
        "sdpa_bwd",
        "<script>window.__xss = 3</script> claims a knob it lacks",
    )
    return b


SCENARIOS: dict[str, Callable[[Ctx], int]] = {
    "pass": scenario_pass,
    "fail": scenario_fail,
    "inconclusive": scenario_inconclusive,
    "incomplete": scenario_incomplete,
    "error": scenario_error,
    "timeout": scenario_timeout,
    "crashed": scenario_crashed,
    "cancelled": scenario_cancelled,
    "not_applicable": scenario_not_applicable,
    "waiting": scenario_waiting,
    "commit_building": scenario_commit_building,
    "xss": scenario_xss,
    "pending": scenario_pending,
    "running": scenario_running,
}
