"""What the jobs of a build reported that is queried across builds, row by row (findings,
capabilities, drift, determinism records), their stage logs, and the report of a finished build,
stored once. A stage's result itself is stored whole with its stage (``StageRow.result``): its
refusal rows are read from there."""

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
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from service.models.base import Base, PerJob, UTCDateTime, utcnow


class FindingRow(PerJob, Base):
    __tablename__ = "findings"

    kind: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    subject: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)


class CapabilityRow(PerJob, Base):
    __tablename__ = "capabilities"

    subject: Mapped[str] = mapped_column(String(64))
    importable: Mapped[bool] = mapped_column(Boolean)
    knob: Mapped[str] = mapped_column(String(64))
    present: Mapped[bool] = mapped_column(Boolean)
    default: Mapped[str | None] = mapped_column(String(100))
    method: Mapped[str | None] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    entry_point: Mapped[str] = mapped_column(String(200), default="")


class StoredDriftRow(PerJob, Base):
    """A drift row (``core.wire.DriftRow``) as the ``drift`` table keeps it."""

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


class DeterminismRecord(PerJob, Base):
    """One subject's deterministic arm on one job, compared with the previous comparable build.

    ``key`` is ``core.history.comparable_key`` of the measurement's comparable fields;
    ``measured`` keeps what the next build compares against (digests, sample, cost).
    ``copied`` marks a rerun's copy of another build's record: it counts once, in that build.
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
        ForeignKey("comparison_pins.id", ondelete="SET NULL", name="fk_determinism_records_pin_id"),
        index=True,
    )
    # the cost gate's band at the time (core.history.CostBand): median, limit, builds
    cost_band: Mapped[dict[str, Any]] = mapped_column(
        JSON,
        default=dict,
        server_default=text("'{}'"),  # rows older than 0011 have none
    )
    # kept from the build a job rerun repeats (``service/jobs/reruns.py``): the measurement was made
    # once, in that build, so a copy never enters the band, ``previous_record`` or the trends
    copied: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class StageLog(PerJob, Base):
    """One stage's runner log as the runner sent it (its last ``core.wire.protocol.LOG_MAX_CHARS``),
    the service's own secrets redacted (``service/results/logs.py``)."""

    __tablename__ = "stage_logs"
    __table_args__ = (UniqueConstraint("job_id", "stage"),)

    stage: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text, default="")


PER_JOB_TABLES: tuple[type[PerJob], ...] = (
    StageLog,
    FindingRow,
    CapabilityRow,
    StoredDriftRow,
    DeterminismRecord,
)


class FinishedReport(Base):
    """The report of a build that can no longer change, as served
    (service/results/stored_reports.py)."""

    __tablename__ = "finished_reports"

    build_id: Mapped[int] = mapped_column(
        ForeignKey("builds.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer)
    etag: Mapped[str] = mapped_column(String(64))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
