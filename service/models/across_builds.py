"""What the service keeps from one build to the next: the configs it chose, the comparison points
(pinned, in series), the bisections of a branch that turned red, the notifications of a
branch's red and green, and the outbox of GitHub statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.models.base import Base, UTCDateTime, utcnow


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
    """A subject's comparison point on a cell of the matrix (``core.cells``: a family on a cuDNN
    backend): the config every build measures its bits and its cost of determinism at, whatever
    its detection walk does (``service/results/pins.py``).

    One row per series. The row of a (subject, cell) with no ``retired_at`` is in force; a
    re-pin, or a change of the subject's definition, retires it and starts series + 1, and the
    records of the old series stay as they were. The database holds "one in force": a unique
    index over the rows with no ``retired_at`` (migrations 0014 and 0021), so a racing second
    series is an ``IntegrityError``, never a second pin in force. A family's host cell is named
    as the family, so its pins are the ones kept per family before the matrix."""

    __tablename__ = "comparison_pins"
    __table_args__ = (
        UniqueConstraint("subject", "cell", "series", name="uq_comparison_pins_cell_series"),
        Index(
            "uq_comparison_pins_in_force",
            "subject",
            "cell",
            unique=True,
            sqlite_where=text("retired_at IS NULL"),
            postgresql_where=text("retired_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    subject: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(16), index=True)  # the cell's family
    cell: Mapped[str] = mapped_column(String(48), index=True)  # core.cells.Cell.name
    series: Mapped[int] = mapped_column(Integer)
    config: Mapped[str] = mapped_column(String(200))
    definition: Mapped[str] = mapped_column(String(64))  # core.subjects.Subject.definition
    source: Mapped[str] = mapped_column(String(16))  # "measured" | "declared" | "operator"
    reason: Mapped[str] = mapped_column(Text, default="")
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


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
    delivered: an outbox, so a restart loses none (``service/outbound/notifications.py``)."""

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


class OutboxStatus(Base):
    """A state a GitHub context of a commit should show, written in the transaction that changed
    the build: an outbox, so a restart loses none, and ``seq`` orders one context's states across
    service replicas (``service/outbound/status_outbox.py``). Only a context's newest state is
    sent; a sent row stays as the newest one told until a newer one is sent."""

    __tablename__ = "status_outbox"
    __table_args__ = (
        UniqueConstraint("sha", "context", "seq"),
        Index("ix_status_outbox_due", "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"), index=True)
    sha: Mapped[str] = mapped_column(String(40))
    context: Mapped[str] = mapped_column(String(200))
    seq: Mapped[int] = mapped_column(Integer)  # per (sha, context), in the order of the commits
    body: Mapped[str] = mapped_column(Text)  # the status as JSON
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending | sent | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
