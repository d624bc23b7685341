"""The wire boundary: every model the service and the runner exchange, and the build report.

The service imports this package; it must not import FastAPI or SQLAlchemy, so a runner host needs
neither. Field names here are the public contract (README.md, docs/architecture.md): add fields
freely, rename none. Every text, number and list a runner reports is bounded (``core/bounds.py``):
these models are the door of the runner protocol.

One module per part, each name importable from here (``from core.wire import Stage``):
``vocabulary`` (stages, statuses, verdicts, job kinds and states; the models' base), ``results``
(what a runner reports of one stage, mirrored by ``runner/inside/documents.py``), ``protocol``
(the runner protocol's messages) and ``report`` (the build report and the build list).
"""

from __future__ import annotations

from core.wire.protocol import (
    LOG_MAX_CHARS,
    ClaimRequest,
    ComparisonPoint,
    HeartbeatAck,
    JobFinish,
    JobLease,
    LeasedPost,
    RememberedConfig,
    RunnerOffline,
    RunnerRegister,
    RunnerRegistered,
    RunnerResume,
    RunnerResumed,
    StagePost,
)
from core.wire.report import (
    BuildAccepted,
    BuildReport,
    BuildsPage,
    BuildSummary,
    Cause,
    Coverage,
    CoverageRow,
    DriftReport,
    Gate,
    HistoryRow,
    JobReport,
    NotRun,
    RefusalReport,
)
from core.wire.results import (
    Capability,
    Check,
    DriftRow,
    Environment,
    Finding,
    RefusalRow,
    StageResult,
    SurfaceKnob,
    Timings,
    TimingValue,
)
from core.wire.vocabulary import (
    RELEASES,
    STAGE_ORDER,
    WHEEL_SOURCES,
    BuildSource,
    BuildStatus,
    Conclusion,
    JobKind,
    JobOutcome,
    JobState,
    Severity,
    Shown,
    Stage,
    Status,
    Verdict,
    WireModel,
    job_word,
)

__all__ = [
    "LOG_MAX_CHARS",
    "RELEASES",
    "STAGE_ORDER",
    "WHEEL_SOURCES",
    "BuildAccepted",
    "BuildReport",
    "BuildSource",
    "BuildStatus",
    "BuildSummary",
    "BuildsPage",
    "Capability",
    "Cause",
    "Check",
    "ClaimRequest",
    "ComparisonPoint",
    "Conclusion",
    "Coverage",
    "CoverageRow",
    "DriftReport",
    "DriftRow",
    "Environment",
    "Finding",
    "Gate",
    "HeartbeatAck",
    "HistoryRow",
    "JobFinish",
    "JobKind",
    "JobLease",
    "JobOutcome",
    "JobReport",
    "JobState",
    "LeasedPost",
    "NotRun",
    "RefusalReport",
    "RefusalRow",
    "RememberedConfig",
    "RunnerOffline",
    "RunnerRegister",
    "RunnerRegistered",
    "RunnerResume",
    "RunnerResumed",
    "Severity",
    "Shown",
    "Stage",
    "StagePost",
    "StageResult",
    "Status",
    "SurfaceKnob",
    "TimingValue",
    "Timings",
    "Verdict",
    "WireModel",
    "job_word",
]
