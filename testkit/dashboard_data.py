"""Builds in every state, written straight into a service's database with the service's models.

Used by the dashboard's browser tests and by ``bench/dashboard_bench.py``. Rows go in with Core
``INSERT``s and explicit ids, so ten thousand builds take seconds; verdicts come from the service's
own rule (``queue.refresh_build``), computed once per scenario and copied to its repeats.

The runs these rows describe (an sm_100 GPU job, a crash, a hang) are made up: no Blackwell GPU
exists here and a test cannot wait for a real hang, so the rows stand in for what runners report.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from runner.inside.registry import SUBJECTS, consumer_subjects
from service.models import (
    Build,
    CapabilityRow,
    CheckRow,
    DriftRowDB,
    FindingRow,
    Job,
    RefusalRowDB,
    Runner,
    StageRow,
    utcnow,
)
from service.queue import refresh_build

ORDER = (
    Runner,
    Build,
    Job,
    StageRow,
    CheckRow,
    FindingRow,
    CapabilityRow,
    DriftRowDB,
    RefusalRowDB,
)
XSS_VERSION = "<script>window.__xss = 1</script>9.9.9"
XSS_BRANCH = "refs/heads/<b>bold</b>"
ACTIVATIONS = tuple(consumer_subjects())
REQUESTS = ("none", "env", "torch_flag", "both", "env_allow+torch_flag")
# What each subject's knob defaults to in the builds these rows describe (1.32.0).
DEFAULTS = {"grouped_gemm_dsrelu": "None"}
ENTRY = {name: (s.entry_point, s.knob, DEFAULTS.get(name, "False")) for name, s in SUBJECTS.items()}
GPU_ENV = {
    "python": "3.11.7",
    "torch": "2.13.0+cu130",
    "gpu": "NVIDIA H200",
    "arch": "sm_90",
    "cudnn_backend": "9.14.0",
    "cutlass_dsl": "4.8.1",
    "sandbox": "netns,uid",
}
CPU_ENV = {**GPU_ENV, "torch": "2.13.0+cpu", "gpu": None, "arch": None, "cudnn_backend": None}
B200_ENV = {**GPU_ENV, "gpu": "NVIDIA B200", "arch": "sm_100"}


@dataclass
class Seeder:
    """Rows by table, with ids allocated here (above what the database already holds)."""

    next_id: dict[type, int]
    rows: dict[type, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def for_engine(cls, engine: Engine) -> Seeder:
        with engine.connect() as conn:
            start: dict[type, int] = {
                m: (conn.scalar(select(func.max(m.id))) or 0) + 1 for m in ORDER
            }
        return cls(next_id=start)

    def add(self, model: type, **values: Any) -> int:
        row_id = self.next_id[model]
        self.next_id[model] = row_id + 1
        self.rows.setdefault(model, []).append({"id": row_id, **values})
        return row_id

    def flush(self, engine: Engine) -> None:
        with engine.begin() as conn:
            for model in ORDER:
                if self.rows.get(model):
                    conn.execute(insert(model), self.rows[model])
        self.rows = {}


@dataclass
class Ctx:
    """What a scenario writes with: the seeder, the clock, the runners, a variant number."""

    s: Seeder
    now: datetime
    runners: dict[str, int]
    variant: int = 0
    lease: timedelta = timedelta(minutes=2)  # how long seeded leases stay unexpired
    clock: datetime | None = None  # the real time, where ``now`` is a build's past

    @property
    def deadline_base(self) -> datetime:
        return self.clock or self.now

    def build(self, **kw: Any) -> int:
        values = {
            "source": "wheel",
            "version": "1.32.0",
            "sha256": hashlib.sha256(f"wheel{self.variant}{kw}".encode()).hexdigest(),
            "filename": None,
            "size": 1_800_000,
            "repo": None,
            "commit": None,
            "branch": None,
            "message": None,
            "submitted_by": "token",
            "created_at": self.now - timedelta(minutes=30),
            "finished_at": None,
            "cancelled_at": None,
            "verdict": "pending",
            "verdict_reason": "",
        }
        values.update(kw)
        if values["source"] == "wheel" and values["filename"] is None:
            values["filename"] = f"nvidia_cudnn_frontend-{values['version']}-cp311-linux_x86_64.whl"
        return self.s.add(Build, **values)

    def job(
        self,
        build_id: int,
        kind: str,
        family: str | None,
        stages: list[str],
        state: str,
        *,
        runner: str | None = None,
        reason: str = "",
        env: dict[str, Any] | None = None,
        attempt: int = 1,
    ) -> int:
        started = self.now - timedelta(minutes=25) if state != "queued" else None
        finished = self.now - timedelta(minutes=5) if state in ("finished", "cancelled") else None
        return self.s.add(
            Job,
            build_id=build_id,
            kind=kind,
            family=family,
            stages=stages,
            state=state,
            reason=reason,
            attempt=attempt,
            runner_id=self.runners.get(runner) if runner else None,
            lease_token_hash=hashlib.sha256(f"lease{build_id}{kind}".encode()).hexdigest()
            if state == "leased"
            else None,
            lease_expires_at=self.deadline_base + self.lease if state == "leased" else None,
            wait_deadline=self.deadline_base + timedelta(hours=24) if kind == "gpu" else None,
            environment=env or {},
            created_at=self.now - timedelta(minutes=30),
            started_at=started,
            finished_at=finished,
        )

    def stage(
        self,
        job_id: int,
        name: str,
        status: str,
        reason: str = "",
        *,
        duration: float = 1.0,
        checks: list[tuple[str, str, str]] | None = None,
        log: str = "",
        version: str | None = None,
    ) -> int:
        stage_id = self.s.add(
            StageRow,
            job_id=job_id,
            name=name,
            status=status,
            reason=reason,
            duration_s=duration,
            version=version,
            log_tail=log,
            created_at=self.now - timedelta(minutes=20),
        )
        for check, check_status, detail in checks or []:
            self.s.add(
                CheckRow,
                stage_id=stage_id,
                name=check,
                status=check_status,
                detail=detail,
                metrics={},
            )
        return stage_id

    def finding(
        self, build_id: int, job_id: int | None, kind: str, severity: str, subject: str, msg: str
    ) -> None:
        self.s.add(
            FindingRow,
            build_id=build_id,
            job_id=job_id,
            kind=kind,
            severity=severity,
            subject=subject,
            message=msg,
        )

    def caps(self, build_id: int, job_id: int, absent: dict[str, str | None] | None = None) -> None:
        """Capabilities of every subject; ``absent`` maps a subject to its import error (or None
        for "importable, no knob")."""
        absent = absent or {}
        for subject, (entry, knob, default) in ENTRY.items():
            missing = subject in absent
            error = absent.get(subject)
            self.s.add(
                CapabilityRow,
                build_id=build_id,
                job_id=job_id,
                subject=subject,
                importable=not (missing and error),
                knob=knob,
                present=not missing,
                default=None if missing else default,
                method=None
                if missing and error
                else ("docstring" if subject == "sdpa_bwd" else "signature"),
                error=error,
                entry_point=entry,
            )

    def drift(
        self,
        build_id: int,
        job_id: int,
        family: str,
        subject: str,
        *,
        control: int,
        det_differing: int = 0,
        runs: int = 16,
        det_runs: int = 24,
        luck: float | None = 0.0007,
        stopped_by: str = "luck_target",
        outputs: tuple[str, ...] = ("dq", "dk", "dv"),
    ) -> None:
        config = {"name": "b4_h16_s2048_causal", "b": 4, "h": 16, "s": 2048, "d": 128}
        for output in outputs:
            for arm, n, k in (
                ("control", runs, control),
                ("deterministic", det_runs, det_differing),
            ):
                self.s.add(
                    DriftRowDB,
                    build_id=build_id,
                    job_id=job_id,
                    family=family,
                    subject=subject,
                    output=output,
                    arm=arm,
                    runs=n,
                    differing=k,
                    distinct=min(k + 1, n),
                    max_abs_diff=(2.4e-4 * k / max(n, 1)) if k else 0.0,
                    finite=True,
                    config=config,
                    luck_probability=luck if arm == "deterministic" else None,
                    stopped_by=stopped_by if arm == "deterministic" else None,
                )

    def refusal(self, build_id: int, job_id: int, *, broken: int = 0) -> None:
        """The 80 rows of the consumer contract; the first ``broken`` deterministic rows observe
        ``passed_false``."""
        left = broken
        for a, req, sb, fb, unit in itertools.product(
            ACTIVATIONS, REQUESTS, (False, True), (False, True), (False, True)
        ):
            if unit or req == "none":
                expected = "default"
            elif sb or (a == "swiglu" and fb):
                expected = "refuse"
            else:
                expected = "deterministic"
            observed, status = expected, "pass"
            if expected == "deterministic" and left:
                observed, status, left = "passed_false", "fail", left - 1
            self.s.add(
                RefusalRowDB,
                build_id=build_id,
                job_id=job_id,
                activation=a,
                request=req,
                scale_bias=sb,
                fc1_bias=fb,
                unit_scale=unit,
                expected=expected,
                observed=observed,
                status=status,
                detail="" if status == "pass" else "the knob was passed as False",
                call_kwargs={"deterministic": True} if observed == "deterministic" else {},
            )


CPU_STAGES = ["install", "probe", "refusal"]
GPU_STAGES = ["install", "probe", "determinism", "numerics", "refusal"]
PROBE_CHECKS = [(f"{s}.knob", "pass", "found by the probe") for s in ENTRY]
REFUSAL_CHECKS = [
    ("grouped_gemm_dsrelu.refusal", "pass", "40 rows as the contract says"),
    ("grouped_gemm_dglu.refusal", "pass", "40 rows as the contract says"),
    ("refusal.state_restored", "pass", "the variable and the torch flag were restored"),
]


def _cpu_job(c: Ctx, b: int, *, refusal: bool = True, broken: int = 0) -> int:
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


def _gpu_job(
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


def _sm90_results(
    flex: tuple[str, str] = PASS, sdpa: tuple[str, str] = PASS
) -> dict[str, tuple[str, str]]:
    return {
        "grouped_gemm_dsrelu": NEEDS_SM100,
        "grouped_gemm_dglu": NEEDS_SM100,
        "flex_attention_bwd": flex,
        "sdpa_bwd": sdpa,
    }


def scenario_pass(c: Ctx) -> int:
    b = c.build(version="1.32.0")
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    g = _gpu_job(c, b, "sm_90", _sm90_results())
    control = 5 + (c.variant * 3) % 11
    c.drift(b, g, "sm_90", "sdpa_bwd", control=control)
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=min(15, control + 3))
    h = _gpu_job(
        c,
        b,
        "sm_100",
        {
            "grouped_gemm_dsrelu": PASS,
            "grouped_gemm_dglu": PASS,
            "flex_attention_bwd": PASS,
            "sdpa_bwd": PASS,
        },
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
    cpu = _cpu_job(c, b, broken=2)
    c.caps(b, cpu)
    fail = ("fail", "deterministic arm varied: 3 of 24 runs differ from run 0, max |d| 1.2e-4")
    g = _gpu_job(c, b, "sm_90", _sm90_results(flex=fail), numerics="pass")
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
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    never = (
        "inconclusive",
        "the control never varied in 16 runs at b1_h8_s512_d64: nothing to certify",
    )
    g = _gpu_job(c, b, "sm_90", _sm90_results(sdpa=never))
    c.drift(b, g, "sm_90", "sdpa_bwd", control=0, luck=1.0, stopped_by="max_repeats")
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=6)
    return b


def scenario_incomplete(c: Ctx) -> int:
    b = c.build(version="1.30.0")
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    g = _gpu_job(c, b, "sm_90", _sm90_results())
    c.drift(b, g, "sm_90", "sdpa_bwd", control=7)
    c.drift(b, g, "sm_90", "flex_attention_bwd", control=11)
    c.job(b, "gpu", "sm_100", GPU_STAGES, "finished", reason="skipped: no sm_100 runner")
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
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    hang = ("timeout", "no result after 1800 s; the process group was killed")
    _gpu_job(
        c,
        b,
        "sm_90",
        _sm90_results(flex=hang, sdpa=PASS),
        determinism="timeout",
        reason="killed after 1800 s",
        numerics="skipped",
        numerics_reason="not run: determinism timed out",
        log="sdpa_bwd: pass at b4_h16_s2048_causal\nflex_attention_bwd: compiling...\n",
    )
    return b


def scenario_crashed(c: Ctx) -> int:
    b = c.build(version="1.32.0")
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    g = _gpu_job(
        c,
        b,
        "sm_90",
        _sm90_results(),
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
    cpu = _cpu_job(c, b)
    c.caps(b, cpu)
    c.job(b, "gpu", "sm_100", GPU_STAGES, "queued")
    return b


def scenario_not_applicable(c: Ctx) -> int:
    b = c.build(version="1.26.0")
    cpu = _cpu_job(c, b)
    c.caps(
        b,
        cpu,
        absent={
            "flex_attention_bwd": "ModuleNotFoundError: No module named 'cudnn.flex_attention'",
            "grouped_gemm_dsrelu": None,
            "grouped_gemm_dglu": None,
        },
    )
    g = _gpu_job(
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
    cpu = _cpu_job(c, b)
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


def seed_runners(s: Seeder, now: datetime) -> dict[str, int]:
    specs = {
        "ci-cpu-1": ({}, now - timedelta(seconds=5), None),
        "h200-a": (
            {"arch": "sm_90", "gpu": "NVIDIA H200", "cc": "9.0", "driver": "570.86.15"},
            now - timedelta(seconds=12),
            None,
        ),
        "builder-1": ({"builder": "true"}, now - timedelta(seconds=20), None),
        "b200-old": (
            {"arch": "sm_100", "gpu": "NVIDIA B200", "cc": "10.0", "driver": "575.51.03"},
            now - timedelta(days=2),
            None,
        ),
        "retired-1": (
            {"arch": "sm_80", "gpu": "NVIDIA A100-SXM4-80GB"},
            now - timedelta(days=30),
            now - timedelta(days=29),
        ),
    }
    out = {}
    for name, (labels, seen, revoked) in specs.items():
        out[name] = s.add(
            Runner,
            name=name,
            labels=labels,
            family=labels.get("arch"),
            builder=labels.get("builder") == "true",
            token_hash=hashlib.sha256(f"runner-{name}".encode()).hexdigest(),
            revoked_at=revoked,
            created_at=now - timedelta(days=40),
            last_seen_at=seen,
        )
    return out


def refresh(engine: Engine, build_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Store each build's verdict by the service's rule; returns (verdict, reason) by id."""
    out = {}
    with Session(engine) as session:
        for build_id in build_ids:
            refresh_build(session, build_id)
            build = session.get(Build, build_id)
            assert build is not None
            out[build_id] = (build.verdict, build.verdict_reason)
        session.commit()
    return out


def seed_all(engine: Engine, *, history: int = 8, now: datetime | None = None) -> dict[str, int]:
    """Runners, ``history`` older passing builds (for the trends) and one build per scenario."""
    now = now or utcnow()
    s = Seeder.for_engine(engine)
    runners = seed_runners(s, now)
    ids: dict[str, int] = {}
    for i in range(history):
        c = Ctx(s, now - timedelta(hours=history - i), runners, variant=i)
        ids[f"history{i}"] = scenario_pass(c)
    for n, (name, make) in enumerate(SCENARIOS.items()):
        ids[name] = make(Ctx(s, now - timedelta(minutes=len(SCENARIOS) - n), runners, variant=n))
    s.flush(engine)
    refresh(engine, list(ids.values()))
    return ids


def seed_many(engine: Engine, count: int, *, batch: int = 500) -> int:
    """``count`` builds cycling through the scenarios, oldest first; returns the newest id.

    Their leases and GPU waits run from the real time, so the service's sweeper does not end
    thousands of week-old jobs while a benchmark runs."""
    now = utcnow()
    s = Seeder.for_engine(engine)
    runners = seed_runners(s, now)
    s.flush(engine)
    names = list(SCENARIOS)
    verdicts: dict[str, tuple[str, str]] = {}
    last = 0
    for start in range(0, count, batch):
        made: dict[int, str] = {}
        for i in range(start, min(count, start + batch)):
            name = names[i % len(names)]
            c = Ctx(s, now - timedelta(minutes=count - i), runners, i, timedelta(days=1), now)
            made[SCENARIOS[name](c)] = name
        if verdicts:
            for row in s.rows[Build]:
                verdict, reason = verdicts[made[row["id"]]]
                row["verdict"], row["verdict_reason"] = verdict, reason
        s.flush(engine)
        if not verdicts:
            firsts = {name: build_id for build_id, name in reversed(made.items())}
            got = refresh(engine, list(firsts.values()))
            verdicts = {name: got[build_id] for name, build_id in firsts.items()}
            with Session(engine) as session:
                for build_id, name in made.items():
                    build = session.get(Build, build_id)
                    assert build is not None
                    build.verdict, build.verdict_reason = verdicts[name]
                session.commit()
        last = max(made)
    return last
