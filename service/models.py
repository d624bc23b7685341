"""The data model: builds, jobs, runners, and the results their stages report."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware in Python, stored as UTC (SQLite has no time zones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Runner(Base):
    __tablename__ = "runners"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    family: Mapped[str | None] = mapped_column(String(16))
    builder: Mapped[bool] = mapped_column(Boolean, default=False)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set when the runner said it stopped (``--once``, SIGTERM); any later call of its clears it.
    offline_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Build(Base):
    __tablename__ = "builds"

    id: Mapped[int] = mapped_column(primary_key=True)
    source: Mapped[str] = mapped_column(String(16))  # "wheel" | "commit"
    version: Mapped[str | None] = mapped_column(String(100))
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    filename: Mapped[str | None] = mapped_column(String(300))
    size: Mapped[int | None] = mapped_column(Integer)
    repo: Mapped[str | None] = mapped_column(String(500))
    commit: Mapped[str | None] = mapped_column(String(40), index=True)
    branch: Mapped[str | None] = mapped_column(String(300))
    message: Mapped[str | None] = mapped_column(Text)  # the head commit's, for commit builds
    submitted_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancelled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    verdict: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    verdict_reason: Mapped[str] = mapped_column(Text, default="")
    # a step of a bisection: only the deciding stages run, no GitHub status is posted
    bisection_id: Mapped[int | None] = mapped_column(
        ForeignKey("bisections.id", ondelete="SET NULL", use_alter=True), index=True
    )
    # made by ``POST /api/builds/{id}/rerun`` (or a job's rerun) of this build
    rerun_of: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))

    jobs: Mapped[list[Job]] = relationship(
        back_populates="build", order_by="Job.id", cascade="all, delete-orphan"
    )


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_kind", "state", "kind"),  # the queue's claim
        Index("ix_jobs_state_runner_id", "state", "runner_id"),  # each runner's leased jobs
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(8))  # "build" | "cpu" | "gpu"
    family: Mapped[str | None] = mapped_column(String(16))
    stages: Mapped[list[str]] = mapped_column(JSON, default=list)
    subjects: Mapped[list[str] | None] = mapped_column(JSON)  # None: every subject
    state: Mapped[str] = mapped_column(String(16), default="queued")
    reason: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id"))
    lease_token_hash: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    wait_deadline: Mapped[datetime | None] = mapped_column(UTCDateTime)
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    build: Mapped[Build] = relationship(back_populates="jobs")
    runner: Mapped[Runner | None] = relationship()
    stage_rows: Mapped[list[StageRow]] = relationship(
        back_populates="job", order_by="StageRow.id", cascade="all, delete-orphan"
    )


class StageRow(Base):
    __tablename__ = "stages"
    __table_args__ = (UniqueConstraint("job_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    version: Mapped[str | None] = mapped_column(String(100))
    log_tail: Mapped[str] = mapped_column(Text, default="")
    timings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # StageResult.timings
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    job: Mapped[Job] = relationship(back_populates="stage_rows")
    checks: Mapped[list[CheckRow]] = relationship(
        order_by="CheckRow.id", cascade="all, delete-orphan"
    )


class CheckRow(Base):
    __tablename__ = "checks"

    id: Mapped[int] = mapped_column(primary_key=True)
    stage_id: Mapped[int] = mapped_column(ForeignKey("stages.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class _PerJob:
    """Rows that belong to one job of one build (deleted with the job's attempt)."""

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )


class FindingRow(_PerJob, Base):
    __tablename__ = "findings"

    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class CapabilityRow(_PerJob, Base):
    __tablename__ = "capabilities"

    subject: Mapped[str] = mapped_column(String(64))
    importable: Mapped[bool] = mapped_column(Boolean)
    knob: Mapped[str] = mapped_column(String(64))
    present: Mapped[bool] = mapped_column(Boolean)
    default: Mapped[str | None] = mapped_column(String(100))
    method: Mapped[str | None] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    entry_point: Mapped[str] = mapped_column(String(200), default="")


class DriftRowDB(_PerJob, Base):
    __tablename__ = "drift"
    # the trends page: one subject's control arm over the newest builds
    __table_args__ = (Index("ix_drift_subject_arm_build_id", "subject", "arm", "build_id"),)

    family: Mapped[str | None] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(64))
    output: Mapped[str] = mapped_column(String(32))
    arm: Mapped[str] = mapped_column(String(16))
    runs: Mapped[int] = mapped_column(Integer)
    differing: Mapped[int] = mapped_column(Integer)
    distinct: Mapped[int] = mapped_column(Integer)
    max_abs_diff: Mapped[float | None] = mapped_column(Float)
    finite: Mapped[bool] = mapped_column(Boolean)
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    luck_probability: Mapped[float | None] = mapped_column(Float)
    stopped_by: Mapped[str | None] = mapped_column(String(32))


class RefusalRowDB(_PerJob, Base):
    __tablename__ = "refusal_rows"

    activation: Mapped[str] = mapped_column(String(16))
    request: Mapped[str] = mapped_column(String(32))
    scale_bias: Mapped[bool] = mapped_column(Boolean)
    fc1_bias: Mapped[bool] = mapped_column(Boolean)
    unit_scale: Mapped[bool] = mapped_column(Boolean)
    expected: Mapped[str] = mapped_column(String(16))
    observed: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str] = mapped_column(Text, default="")
    call_kwargs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ChosenConfig(Base):
    """The determinism config picked by measuring, per ``core.comparable.ConfigKey``
    (subject, family, GPU model, cuDNN backend; ``""`` where unknown), and the build that chose it:
    the next GPU job of the family starts there, so builds stay comparable."""

    __tablename__ = "chosen_configs"
    __table_args__ = (UniqueConstraint("subject", "family", "gpu", "cudnn_backend"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    subject: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(16), index=True)
    gpu: Mapped[str] = mapped_column(String(200), default="")
    cudnn_backend: Mapped[str] = mapped_column(String(64), default="")
    config: Mapped[str] = mapped_column(String(200))
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ComparisonPin(Base):
    """A subject's comparison point on a family: the config every build measures its bits and
    its cost of determinism at, whatever its detection walk does (``service/pins.py``).

    One row per series. The row of a (subject, family) with no ``retired_at`` is in force; a
    re-pin, or a change of the subject's definition, retires it and starts series + 1, and the
    records of the old series stay as they were."""

    __tablename__ = "comparison_pins"
    __table_args__ = (UniqueConstraint("subject", "family", "series"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    subject: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(16), index=True)
    series: Mapped[int] = mapped_column(Integer)
    config: Mapped[str] = mapped_column(String(200))
    definition: Mapped[str] = mapped_column(String(64))  # core.subjects.Subject.definition
    source: Mapped[str] = mapped_column(String(16))  # "measured" | "declared" | "operator"
    reason: Mapped[str] = mapped_column(Text, default="")
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class FinishedReport(Base):
    """The report of a build that can no longer change, as served (service/stored_reports.py)."""

    __tablename__ = "finished_reports"

    build_id: Mapped[int] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer)
    etag: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DeterminismRecord(_PerJob, Base):
    """One subject's deterministic arm on one job, compared with the previous comparable build.

    ``key`` is ``core.history.comparable_key`` of the measurement's comparable fields;
    ``measured`` keeps what the next build compares against (digests, sample, cost).
    """

    __tablename__ = "determinism_records"

    family: Mapped[str | None] = mapped_column(String(16))
    subject: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(64), index=True)
    config: Mapped[str | None] = mapped_column(String(200))
    measured: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    bits: Mapped[str] = mapped_column(String(16))
    changed: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    previous_build_id: Mapped[int | None] = mapped_column(
        ForeignKey("builds.id", ondelete="SET NULL")
    )
    cost_ratio: Mapped[float | None] = mapped_column(Float)
    previous_cost_ratio: Mapped[float | None] = mapped_column(Float)
    cost_regressed: Mapped[bool] = mapped_column(Boolean, default=False)
    timer: Mapped[str | None] = mapped_column(String(16))
    # the comparison point's series it was measured at; None: measured before any pin existed
    pin_id: Mapped[int | None] = mapped_column(
        ForeignKey("comparison_pins.id", ondelete="SET NULL"), index=True
    )
    # the cost gate's band at the time (core.history.CostBand): median, limit, builds
    cost_band: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class StageLog(_PerJob, Base):
    """One stage's runner log as the runner sent it (its last ``core.wire.protocol.LOG_MAX_CHARS``),
    the service's own secrets redacted (``service/logs.py``)."""

    __tablename__ = "stage_logs"
    __table_args__ = (UniqueConstraint("job_id", "stage"),)

    stage: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text, default="")


PER_JOB_TABLES: tuple[type[_PerJob], ...] = (
    StageLog,
    FindingRow,
    CapabilityRow,
    DriftRowDB,
    RefusalRowDB,
    DeterminismRecord,
)


class WebhookDelivery(Base):
    """A GitHub delivery seen once: a redelivery of the same id creates nothing new."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery: Mapped[str] = mapped_column(String(100), unique=True)
    event: Mapped[str] = mapped_column(String(50))
    outcome: Mapped[str] = mapped_column(String(200))
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Artifact(Base):
    """A wheel built from a commit, kept by (commit, Python tag) so a rebuild is free."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("repo", "commit", "python_tag"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    repo: Mapped[str] = mapped_column(String(500))
    commit: Mapped[str] = mapped_column(String(40), index=True)
    python_tag: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    filename: Mapped[str] = mapped_column(String(300))
    size: Mapped[int] = mapped_column(Integer)
    version: Mapped[str | None] = mapped_column(String(100))
    log_sha256: Mapped[str | None] = mapped_column(String(64))
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Bisection(Base):
    """The search for the first bad commit of a red transition between two builds of a branch."""

    __tablename__ = "bisections"

    id: Mapped[int] = mapped_column(primary_key=True)
    repo: Mapped[str] = mapped_column(String(500))
    branch: Mapped[str] = mapped_column(String(300))
    good_build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    bad_build_id: Mapped[int | None] = mapped_column(
        ForeignKey("builds.id", ondelete="SET NULL"), unique=True
    )
    good_commit: Mapped[str] = mapped_column(String(40))
    bad_commit: Mapped[str] = mapped_column(String(40))
    question: Mapped[dict[str, Any]] = mapped_column(JSON)
    commits: Mapped[list[str]] = mapped_column(JSON, default=list)  # GOOD..BAD, oldest first
    # opening (the mirror is read) -> running -> finished | cancelled | failed
    state: Mapped[str] = mapped_column(String(16), default="opening", index=True)
    max_builds: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str | None] = mapped_column(String(16))  # found | range | capped
    candidates: Mapped[list[str]] = mapped_column(JSON, default=list)
    first_bad: Mapped[dict[str, str] | None] = mapped_column(JSON)  # sha, subject, author
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    steps: Mapped[list[BisectionStep]] = relationship(
        order_by="BisectionStep.id", cascade="all, delete-orphan"
    )


class BisectionStep(Base):
    """One commit tested for a bisection: its build and, once it finished, good, bad or skip."""

    __tablename__ = "bisection_steps"

    id: Mapped[int] = mapped_column(primary_key=True)
    bisection_id: Mapped[int] = mapped_column(
        ForeignKey("bisections.id", ondelete="CASCADE"), index=True
    )
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    commit: Mapped[str] = mapped_column(String(40))
    mark: Mapped[str | None] = mapped_column(String(8))  # good | bad | skip; None while it runs
    detail: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Notification(Base):
    """An outgoing notification (a watched branch turned red, or green again), kept until it is
    delivered: an outbox, so a restart loses none (``service/notifications.py``)."""

    __tablename__ = "notifications"

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    event: Mapped[str] = mapped_column(String(32))  # branch_red | branch_green
    body: Mapped[str] = mapped_column(Text)  # exactly the bytes sent (and signed)
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
