"""The build report, as ``GET /api/builds/{id}`` and ``fe-ci validate --json`` give it, and the
build list. The field names are the public contract (README.md, docs/architecture.md): add fields
freely, rename none.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from core.wire.results import (
    Capability,
    DriftRow,
    Environment,
    Finding,
    RefusalRow,
    StageResult,
    SurfaceKnob,
)
from core.wire.vocabulary import (
    BuildStatus,
    Conclusion,
    JobKind,
    JobOutcome,
    JobState,
    Shown,
    Stage,
    Status,
    Verdict,
    WireModel,
    job_word,
)


class JobReport(WireModel):
    id: int | None = None
    kind: JobKind
    family: str | None = None
    # a GPU job's cell of the matrix (core/cells.py): its family on the host's cuDNN backend has
    # the family's name (``sm_90``), another backend adds it (``sm_90-cudnn9.28.1``)
    cell: str | None = None
    runner: str | None = None
    attempt: int = 1
    status: JobState
    outcome: JobOutcome | None = None  # how it ended (None: still open); ``reason`` says why
    reason: str = ""
    environment: Environment = Field(default_factory=Environment)
    stages: list[StageResult] = Field(default_factory=list)
    # a queued job no alive runner can take, said so: "no runner with arch=sm_100 is alive"
    waiting: str | None = None
    # a GPU job that reuses the CPU job's refusal decisions (its family's rows are intercepted
    # decisions, the same as on a CPU): that job's id; its refusal stage says what they were
    refusal_from: int | None = None
    # the one word every page shows for this job (``vocabulary.job_word``), set from the above
    shown: Shown = Shown.pending

    @model_validator(mode="after")
    def _shown(self) -> JobReport:
        self.shown = job_word(self.status, self.outcome, self.waiting)
        return self

    @property
    def cell_name(self) -> str | None:
        """The name contexts and gate names key a GPU job by (its family's, before cells)."""
        return self.cell or self.family


class DriftReport(DriftRow):
    job_id: int | None = None
    family: str | None = None
    cell: str | None = None  # the job's cell of the matrix (core/cells.py)


class RefusalReport(RefusalRow):
    job_id: int | None = None


class NotRun(WireModel):
    """A subject whose determinism did not run in a build, and why."""

    subject: str
    status: Status  # skipped | not_applicable
    reason: str


class Cause(WireModel):
    """One thing that holds the verdict below ``pass`` (what did not run is ``not_run``)."""

    kind: str  # "check" | "stage" | "finding" | "job"
    name: str  # the check's name, the stage's, the finding's kind, or "<kind> job"
    status: str  # fail | error | timeout | crashed | inconclusive
    stage: Stage | None = None
    job_id: int | None = None
    family: str | None = None
    cell: str | None = None  # the GPU job's cell of the matrix (core/cells.py)
    subject: str | None = None
    reason: str = ""  # one line, bounded
    repro: str | None = None  # the one command that reproduces it, where there is one


class Gate(WireModel):
    """The required checks (``--require``, ``FE_CI_REQUIRE``) and what they conclude."""

    require: list[str]
    conclusion: Conclusion
    reason: str


class HistoryRow(WireModel):
    """One subject on one job, against the previous build that ran the same comparable key."""

    job_id: int | None = None
    family: str | None = None
    cell: str | None = None  # the job's cell of the matrix (core/cells.py): its series' key
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


class CoverageRow(SurfaceKnob):
    """How this build's jobs covered one knob (``core/surface.py``)."""

    status: str  # exercised | compile_only | refusal_only | not_covered
    subject: str | None = None
    families: list[str] = Field(default_factory=list)  # where its subject runs
    why: str = ""


class Coverage(WireModel):
    summary: str = ""  # "17 knobs: 6 exercised, 4 compile-only, 2 refusal-only, 5 not covered"
    rows: list[CoverageRow] = Field(default_factory=list)


class BuildReport(WireModel):
    id: int | None = None
    source: str  # core.wire.vocabulary.BuildSource: "wheel" | "commit" | "release"
    version: str | None = None
    sha256: str | None = None
    filename: str | None = None
    repo: str | None = None
    commit: str | None = None
    branch: str | None = None
    submitted_by: str | None = None
    created_at: datetime | None = None
    rerun_of: int | None = None  # the build this one reruns
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
    # the build's determinism surface (its probe's discovery) and how this build covered it
    surface: list[SurfaceKnob] = Field(default_factory=list)
    coverage: Coverage = Field(default_factory=Coverage)


class BuildSummary(WireModel):
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
    rerun_of: int | None = None  # the build this one reruns


class BuildsPage(WireModel):
    items: list[BuildSummary]
    next_cursor: int | None = None


class BuildAccepted(WireModel):
    build_id: int
    url: str
