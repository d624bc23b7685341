"""The work: builds (with the webhook deliveries that make commit builds, and the wheels built from
commits), their jobs, the runners that take them, and each job's stages and checks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.models.base import Base, UTCDateTime, utcnow


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

    def is_alive(self, since: datetime) -> bool:
        """Alive: not revoked, not stopped, and seen since ``since`` (``Settings.alive_window``
        ago), the rule ``service/jobs/capable.py::alive`` queries."""
        return self.revoked_at is None and self.offline_at is None and self.last_seen_at >= since


class Build(Base):
    __tablename__ = "builds"

    id: Mapped[int] = mapped_column(primary_key=True)
    source: Mapped[str] = mapped_column(String(16))  # core.wire.BuildSource
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
        ForeignKey(
            "bisections.id", ondelete="SET NULL", use_alter=True, name="fk_builds_bisection_id"
        ),
        index=True,
    )
    # made by ``POST /api/builds/{id}/rerun`` (or a job's rerun) of this build
    rerun_of: Mapped[int | None] = mapped_column(
        ForeignKey("builds.id", ondelete="SET NULL", name="fk_builds_rerun_of_builds")
    )

    jobs: Mapped[list[Job]] = relationship(
        back_populates="build", order_by="Job.id", cascade="all, delete-orphan"
    )


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_kind", "state", "kind"),  # the queue's claim
        Index("ix_jobs_state_runner_id", "state", "runner_id"),  # each runner's leased jobs
        Index("ix_jobs_state_requires", "state", "requires"),  # which requirements are queued
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(8))  # "build" | "cpu" | "gpu"
    family: Mapped[str | None] = mapped_column(String(16))
    # what a runner's labels must satisfy (core/cells.py: canonical ``arch=sm_90,cudnn=9.28.1``)
    requires: Mapped[str] = mapped_column(String(200), default="", server_default="")
    # a GPU job's cell of the matrix (core.cells.Cell.name: ``sm_90``, ``sm_90-cudnn9.28.1``)
    cell: Mapped[str | None] = mapped_column(String(48))
    stages: Mapped[list[str]] = mapped_column(JSON, default=list)
    subjects: Mapped[list[str] | None] = mapped_column(JSON)  # None: every subject
    state: Mapped[str] = mapped_column(String(16), default="queued")
    # how an ended job ended (core.wire.JobOutcome; None while open), set with its state by
    # service/jobs/transitions.py; ``reason`` is the human why, never parsed
    outcome: Mapped[str | None] = mapped_column(String(16))
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
    """One stage of one job: its result stored whole (``result``, the ``core.wire.StageResult``
    the runner posted, as the door validated it), and beside it only what is queried across
    builds: its status, reason and seconds (the grid, the trends), its checks (``CheckRow``) and a
    probe's surface (the line's feature regressions)."""

    __tablename__ = "stages"
    __table_args__ = (UniqueConstraint("job_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    # the StageResult as posted (its log tail cut to its end, ``STORED_LOG_TAIL``); for a stage
    # stored before 0019, its own fields and checks as its row kept them
    result: Mapped[dict[str, Any]] = mapped_column(JSON)
    surface: Mapped[list[dict[str, Any]]] = mapped_column(  # StageResult.surface (the probe's)
        JSON,
        default=list,
        server_default=text("'[]'"),  # rows older than 0013 have none
    )
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


class WebhookDelivery(Base):
    """A GitHub delivery seen once: a redelivery of the same id creates nothing new."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery: Mapped[str] = mapped_column(String(100), unique=True)
    event: Mapped[str] = mapped_column(String(50))
    outcome: Mapped[str] = mapped_column(String(200))
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class WatchedRelease(Base):
    """A release the watcher found on the package index, taken once: the unique (package,
    version) lets one service process alone submit it, and a restart find it done.

    ``state``: ``pending`` (taken, its build not yet made: retried at the next poll), ``submitted``
    (its build is ``build_id``), ``seen`` (out before the watcher's first poll, not validated) or
    ``refused`` (its wheel failed a check; ``reason`` says which)."""

    __tablename__ = "watched_releases"
    __table_args__ = (UniqueConstraint("package", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    package: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    filename: Mapped[str | None] = mapped_column(String(300))
    sha256: Mapped[str | None] = mapped_column(String(64))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
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
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
