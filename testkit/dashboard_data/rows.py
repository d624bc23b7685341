"""The rows a scenario writes: a seeder that allocates ids and inserts with Core, and the
context a scenario writes builds, jobs, stages (a refusal stage's rows in its stored result),
findings, capabilities and drift with.

The runs these rows describe (an sm_100 GPU job, a crash, a hang) are made up: no Blackwell GPU
exists here and a test cannot wait for a real hang, so the rows stand in for what runners report.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, insert, select

from core.subjects import SUBJECTS, consumer_subjects
from service.models import (
    Build,
    CapabilityRow,
    CheckRow,
    FindingRow,
    Job,
    Runner,
    StageRow,
    StoredDriftRow,
)

ORDER = (
    Runner,
    Build,
    Job,
    StageRow,
    CheckRow,
    FindingRow,
    CapabilityRow,
    StoredDriftRow,
)
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
        outcome: str | None = None,
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
            outcome=outcome or {"finished": "ran", "cancelled": "cancelled"}.get(state),
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
        result = {
            "name": name,
            "status": status,
            "reason": reason,
            "duration_s": duration,
            "checks": [
                {"name": c, "status": cs, "detail": d, "metrics": {}} for c, cs, d in checks or []
            ],
            "version": version,
            "log_tail": log,
        }
        stage_id = self.s.add(
            StageRow,
            job_id=job_id,
            name=name,
            status=status,
            reason=reason,
            duration_s=duration,
            result=result,
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
                    StoredDriftRow,
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
        """The 80 rows of the consumer contract, in the result of the job's refusal stage (seeded
        before); the first ``broken`` deterministic rows observe ``passed_false``."""
        (stage,) = (
            r
            for r in self.s.rows.get(StageRow, [])
            if r["job_id"] == job_id and r["name"] == "refusal"
        )
        rows = stage["result"].setdefault("refusal", [])
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
            rows.append(
                {
                    "activation": a,
                    "request": req,
                    "scale_bias": sb,
                    "fc1_bias": fb,
                    "unit_scale": unit,
                    "expected": expected,
                    "observed": observed,
                    "status": status,
                    "detail": "" if status == "pass" else "the knob was passed as False",
                    "call_kwargs": {"deterministic": True} if observed == "deterministic" else {},
                }
            )
