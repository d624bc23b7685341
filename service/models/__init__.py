"""The data model: builds, jobs, runners, the results their stages report, and what the service
keeps from one build to the next.

One module per part, each name importable from here (``from service.models import Build``):
``base`` (the declarative base, UTC times, the columns of a per-job row), ``builds`` (builds,
jobs, runners, stages and checks; webhook deliveries, releases watched and commit artifacts),
``results`` (what the jobs reported, row by row, and a finished build's stored report) and
``across_builds`` (chosen configs, comparison pins, bisections, notifications, the outbox of
GitHub statuses). Importing the package imports every module, so ``Base.metadata`` holds every table
(``service/migrations/env.py`` compares it with the migrations).
"""

from __future__ import annotations

from service.models.across_builds import (
    Bisection,
    BisectionStep,
    ChosenConfig,
    ComparisonPin,
    Notification,
    OutboxStatus,
)
from service.models.base import Base, PerJob, UTCDateTime, utcnow
from service.models.builds import (
    Artifact,
    Build,
    CheckRow,
    Job,
    Runner,
    StageRow,
    WatchedRelease,
    WebhookDelivery,
)
from service.models.results import (
    PER_JOB_TABLES,
    CapabilityRow,
    DeterminismRecord,
    FindingRow,
    FinishedReport,
    StageLog,
    StoredDriftRow,
)

__all__ = [
    "PER_JOB_TABLES",
    "Artifact",
    "Base",
    "Bisection",
    "BisectionStep",
    "Build",
    "CapabilityRow",
    "CheckRow",
    "ChosenConfig",
    "ComparisonPin",
    "DeterminismRecord",
    "FindingRow",
    "FinishedReport",
    "Job",
    "Notification",
    "OutboxStatus",
    "PerJob",
    "Runner",
    "StageLog",
    "StageRow",
    "StoredDriftRow",
    "UTCDateTime",
    "WatchedRelease",
    "WebhookDelivery",
    "utcnow",
]
