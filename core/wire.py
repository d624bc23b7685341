"""The wire boundary: every model the service and the runner exchange, and the build report.

The service imports this module; it must not import FastAPI or SQLAlchemy, so a runner host needs
neither. Field names here are the public contract (README.md, docs/architecture.md): add
fields freely, rename none.
``Check``, ``Finding``, ``Capability``, ``DriftRow``, ``RefusalRow`` and ``StageResult`` mirror the
documents a stage writes inside the candidate (``runner/inside/documents.py``): a field added here
is added there (``tests/test_documents.py`` keeps the two in step).
Every text, number and list a runner reports is bounded (``core/bounds.py``): these models are
the door of the runner protocol.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core import bounds
from core.bounds import Count, JsonObject, Name, Short, Text
from core.subjects import FAMILIES


class Stage(StrEnum):
    build = "build"
    install = "install"
    probe = "probe"
    determinism = "determinism"
    numerics = "numerics"
    refusal = "refusal"


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


class Status(StrEnum):
    """Outcome of a stage or a check."""

    pass_ = "pass"
    fail = "fail"
    inconclusive = "inconclusive"
    error = "error"
    timeout = "timeout"
    crashed = "crashed"
    skipped = "skipped"
    not_applicable = "not_applicable"


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Verdict(StrEnum):
    pending = "pending"
    cancelled = "cancelled"
    fail = "fail"
    error = "error"
    inconclusive = "inconclusive"
    incomplete = "incomplete"
    pass_ = "pass"


class JobKind(StrEnum):
    build = "build"
    cpu = "cpu"
    gpu = "gpu"


class JobState(StrEnum):
    waiting = "waiting"
    queued = "queued"
    leased = "leased"
    finished = "finished"
    cancelled = "cancelled"


class BuildStatus(StrEnum):
    queued = "queued"
    running = "running"
    finished = "finished"
    cancelled = "cancelled"


class Conclusion(StrEnum):
    """What the gate says (``core/gate.py``): GitHub's check-run words, plus ``pending``."""

    success = "success"
    failure = "failure"
    neutral = "neutral"  # a required check did not run
    pending = "pending"  # a required check has still to run


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", use_enum_values=False)


# ---------------------------------------------------------------- results produced by a runner


class Check(_Model):
    name: Name
    status: Status
    detail: Text = ""
    metrics: JsonObject = Field(default_factory=dict)
    repro: Text | None = None  # failing or inconclusive: the one command that reproduces it


class Finding(_Model):
    kind: Short
    severity: Severity
    subject: Short | None = None
    message: Text
    # in a build report: the jobs that saw it
    job_ids: list[int] = Field(default_factory=list, max_length=1000)


class Capability(_Model):
    """What the probe learned about one subject of one build."""

    importable: bool
    knob: Short
    present: bool
    default: bounds.Phrase | None = None
    # "signature" | "docstring" | None when nothing could be read
    method: bounds.Word | None = None
    error: Text | None = None
    entry_point: Name = ""


class DriftRow(_Model):
    subject: Short
    output: bounds.Term
    arm: bounds.Word  # "control" | "deterministic"
    runs: Count
    differing: Count
    distinct: Count
    max_abs_diff: Annotated[bounds.Finite, Field(ge=0.0)] | None
    finite: bool
    config: JsonObject = Field(default_factory=dict)
    luck_probability: bounds.Probability | None = None
    stopped_by: bounds.Term | None = None


class RefusalRow(_Model):
    activation: bounds.Word
    request: bounds.Term
    scale_bias: bool
    fc1_bias: bool
    unit_scale: bool
    expected: bounds.Word
    observed: bounds.Word
    status: Status
    detail: Text = ""
    call_kwargs: JsonObject = Field(default_factory=dict)  # what the wrapper was called with


TimingValue = bounds.Finite | int | bool | None
Timings = Annotated[
    dict[Short, Annotated[dict[Short, TimingValue], Field(max_length=32)]],
    Field(max_length=32),
]


class StageResult(_Model):
    name: Stage
    status: Status
    reason: Text = ""
    duration_s: bounds.Seconds = 0.0
    checks: list[Check] = Field(default_factory=list, max_length=2000)
    findings: list[Finding] = Field(default_factory=list, max_length=500)
    capabilities: dict[Short, Capability] = Field(default_factory=dict, max_length=64)
    drift: list[DriftRow] = Field(default_factory=list, max_length=2000)
    refusal: list[RefusalRow] = Field(default_factory=list, max_length=1000)
    # the version the installed build reports (install/probe)
    version: bounds.Phrase | None = None
    log_tail: bounds.LogText = ""
    # where the stage's seconds went (determinism: {"stage": {...}, <subject>: {phase: s}}, as
    # ``runner.inside.determinism.run`` documents); bounded, numbers and flags only
    timings: Timings = Field(default_factory=dict)


class Environment(_Model):
    python: Name | None = None
    torch: Name | None = None
    gpu: Name | None = None
    arch: Short | None = None
    cudnn_backend: Short | None = None
    cutlass_dsl: Name | None = None
    sandbox: Name = "none"


# ---------------------------------------------------------------- the runner protocol


class RunnerRegister(_Model):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")
    labels: bounds.Labels = Field(default_factory=dict)
    # Take the name over from a runner that is still alive (its token stops working), as
    # GitHub's runner ``--replace`` does; without it a live runner's name is refused (409).
    replace: bool = False


class RunnerRegistered(_Model):
    runner_id: int
    name: str
    token: str


class RunnerResume(_Model):
    """A runner restarted on its host, back under the token it kept (``runner/state.py``)."""

    labels: bounds.Labels = Field(default_factory=dict)
    # Jobs whose finished results the runner kept and will send: their leases stay; every other
    # job leased to the runner belonged to its previous process and is handed back.
    holding: list[int] = Field(default_factory=list, max_length=1000)


class RunnerResumed(_Model):
    runner_id: int
    name: str
    handed_back: list[int] = Field(default_factory=list)


class RunnerOffline(_Model):
    """A runner stopping cleanly; ``holding`` as in ``RunnerResume``."""

    holding: list[int] = Field(default_factory=list, max_length=1000)


class ClaimRequest(_Model):
    wait_s: float = Field(default=0.0, ge=0.0, le=30.0)


class RememberedConfig(_Model):
    """A config chosen by an earlier build, remembered per (subject, family, GPU model, backend).

    A lease carries every one of its family's; the determinism stage uses those whose GPU model
    and cuDNN backend match the host it runs on (``core.comparable``).
    """

    subject: str = Field(max_length=64)
    family: str = Field(max_length=16)
    gpu: str | None = Field(default=None, max_length=200)
    cudnn_backend: str | None = Field(default=None, max_length=64)
    config: str = Field(max_length=200)
    build_id: int | None = None

    @model_validator(mode="after")
    def _declared(self) -> RememberedConfig:
        """Only a config the subject declares, of a family there is, is remembered or leased."""
        if self.family not in FAMILIES:
            raise ValueError(f"{self.family!r} is not a GPU family ({', '.join(FAMILIES)})")
        if bad := bounds.undeclared(self.subject, [self.config]):
            raise ValueError(str(bad))
        return self


class ComparisonPoint(_Model):
    """A subject's comparison point on a family: every build measures the deterministic arm's
    bits and the cost of determinism there, wherever its detection walk goes."""

    subject: str = Field(max_length=64)
    family: str = Field(max_length=16)
    config: str = Field(max_length=200)
    series: int | None = None  # a re-pin or a new definition of the subject starts the next
    source: str = Field(default="measured", max_length=16)  # "measured" | "declared" | "operator"


class JobLease(_Model):
    job_id: int
    build_id: int
    kind: JobKind
    family: str | None
    attempt: int
    lease_token: str
    lease_expires_at: datetime
    lease_seconds: int
    wheel_url: str | None
    wheel_filename: str | None
    wheel_sha256: str | None
    version: str | None
    stages: list[Stage]
    repo: str | None = None
    commit: str | None = None
    artifact_url: str | None = None  # build jobs upload the wheel here
    start_configs: list[RememberedConfig] = Field(default_factory=list)  # gpu jobs
    subjects: list[str] | None = None  # only these subjects (a bisection step); None: all
    comparison: list[ComparisonPoint] = Field(default_factory=list)  # gpu jobs: the pins
    # the build's source is trusted (a commit of the configured repository, built by fe-ci's
    # own builder): the service decides; only then may its compiled kernels be shared by source
    trusted_source: bool = False


class LeasedPost(_Model):
    lease_token: str = Field(min_length=1, max_length=200)


class HeartbeatAck(_Model):
    lease_expires_at: datetime
    cancelled: bool = False


# A stage's runner log travels with its result, cut to its last this many characters.
LOG_MAX_CHARS = 64 * 1024


class StagePost(LeasedPost):
    result: StageResult
    log: str | None = Field(default=None, max_length=LOG_MAX_CHARS)  # the stage's log, its end


class JobFinish(LeasedPost):
    environment: Environment = Field(default_factory=Environment)
    error: Text | None = None


# ---------------------------------------------------------------- the build report


class JobReport(_Model):
    id: int | None = None
    kind: JobKind
    family: str | None = None
    runner: str | None = None
    attempt: int = 1
    status: JobState
    reason: str = ""
    environment: Environment = Field(default_factory=Environment)
    stages: list[StageResult] = Field(default_factory=list)
    # a queued job no alive runner can take, said so: "no runner with arch=sm_100 is alive"
    waiting: str | None = None


class DriftReport(DriftRow):
    job_id: int | None = None
    family: str | None = None


class RefusalReport(RefusalRow):
    job_id: int | None = None


class NotRun(_Model):
    """A subject whose determinism did not run in a build, and why."""

    subject: str
    status: Status  # skipped | not_applicable
    reason: str


class Cause(_Model):
    """One thing that holds the verdict below ``pass`` (what did not run is ``not_run``)."""

    kind: str  # "check" | "stage" | "finding" | "job"
    name: str  # the check's name, the stage's, the finding's kind, or "<kind> job"
    status: str  # fail | error | timeout | crashed | inconclusive
    stage: Stage | None = None
    job_id: int | None = None
    family: str | None = None
    subject: str | None = None
    reason: str = ""  # one line, bounded
    repro: str | None = None  # the one command that reproduces it, where there is one


class Gate(_Model):
    """The required checks (``--require``, ``FE_CI_REQUIRE``) and what they conclude."""

    require: list[str]
    conclusion: Conclusion
    reason: str


class HistoryRow(_Model):
    """One subject on one job, against the previous build that ran the same comparable key."""

    job_id: int | None = None
    family: str | None = None
    subject: str
    config: str | None = None
    bits: str  # "unchanged" | "changed" | "first" (no earlier build ran this key)
    changed: dict[str, float | None] = Field(default_factory=dict)  # output -> max |d| on sample
    previous_build_id: int | None = None
    cost_ratio: float | None = None  # median deterministic-arm run over median control-arm run
    previous_cost_ratio: float | None = None
    cost_regressed: bool = False
    timer: str | None = None  # "cuda_events" | "perf_counter"
    # the cost gate's band, learned from the genuine builds of the series (core.history.cost_band)
    cost_median: float | None = None
    cost_limit: float | None = None  # flagged above this
    cost_builds: int = 0
    # the comparison point's series: a re-pin (or a new subject definition) starts a new one
    series: int | None = None
    series_start: bool = False  # the first build of a series that replaced another


class BuildReport(_Model):
    id: int | None = None
    source: str  # "wheel" | "commit"
    version: str | None = None
    sha256: str | None = None
    filename: str | None = None
    repo: str | None = None
    commit: str | None = None
    branch: str | None = None
    submitted_by: str | None = None
    created_at: datetime | None = None
    status: BuildStatus
    verdict: Verdict
    verdict_reason: str = ""
    negative_control: bool = False
    capabilities: dict[str, Capability] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    jobs: list[JobReport] = Field(default_factory=list)
    drift: list[DriftReport] = Field(default_factory=list)
    refusal: list[RefusalReport] = Field(default_factory=list)
    not_run: list[NotRun] = Field(default_factory=list)  # every subject that did not run, why
    history: list[HistoryRow] = Field(default_factory=list)
    causes: list[Cause] = Field(default_factory=list)  # every failing check, stage, finding, job
    gate: Gate | None = None


class BuildSummary(_Model):
    id: int
    source: str
    version: str | None
    filename: str | None = None
    commit: str | None = None
    branch: str | None = None
    status: BuildStatus
    verdict: Verdict
    created_at: datetime
    url: str


class BuildsPage(_Model):
    items: list[BuildSummary]
    next_cursor: int | None = None


class BuildAccepted(_Model):
    build_id: int
    url: str
