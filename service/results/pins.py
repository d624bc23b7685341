"""Comparison points: one config per (subject, cell), in series, measured by every build.

A cell is a family on a cuDNN backend (``core.cells``); a family's host cell is named as the
family, so its pins are the ones a family had before the matrix, and a cell on another backend
has pins and series of its own. The detection walk may move from build to build; the comparison
of bits and cost does not. A subject's point on a cell is chosen once: declared by the subject
(``core.subjects``), or the config of the first build whose walk settled where the control
varied robustly (``core.history.robust_config``). It changes only when the subject's definition
changes or an operator re-pins it; either starts a new series, and the old series' records stay
as they were.

- ``for_lease``: the pins a GPU job of a cell is leased with (after retiring pins whose
  subject's definition changed and starting declared ones);
- ``held_by``: the pins in force when a job was leased, which its measurements must match;
- ``series_for``: the series a posted measurement joins (or starts), or why it is refused;
- ``repin``: an operator's re-pin.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core import cells, history
from core.subjects import SUBJECTS, Subject
from core.wire import Check, ComparisonPoint
from service.errors import OffPin, UnknownConfig
from service.models import ComparisonPin, Job, utcnow

log = logging.getLogger("fe_ci.pins")


# A re-pin that lost a race to another (the unique index of the pins in force refused its
# series) reads the winner and goes again, at most this many times.
REPIN_ATTEMPTS = 8


def cell_of(job: Job) -> str | None:
    """The cell a GPU job's pins are kept by: its own, or, for a job made before the matrix,
    its family's host cell (named as the family)."""
    return job.cell or job.family


def family_of(cell: str) -> str:
    family = cells.family_of(cell)
    if family is None:
        raise ValueError(f"{cell!r} is not a cell name")
    return family


def queue_behind_others(session: Session, subject: str, cell: str) -> None:
    """Wait for any other transaction changing the pins of (subject, cell) to end, and hold
    them off until this one does. On Postgres a transaction-scoped advisory lock (a row lock
    cannot queue re-pins while no pin is in force, nor one that a racer is retiring); SQLite
    runs one writer at a time already. The unique index stays the guarantee either way."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
            {"key": f"comparison_pins:{subject}:{cell}"},
        )


def active(
    session: Session, subject: str, cell: str, *, lock: bool = False
) -> ComparisonPin | None:
    """The pin of (subject, cell) in force now (the database holds at most one: the unique
    index ``uq_comparison_pins_in_force``); ``lock`` takes its row lock where the database has
    row locks (Postgres), so a racing re-pin waits for this transaction."""
    stmt = (
        select(ComparisonPin)
        .where(ComparisonPin.subject == subject, ComparisonPin.cell == cell)
        .where(ComparisonPin.retired_at.is_(None))
        .order_by(ComparisonPin.series.desc())
        .limit(1)
    )
    return session.scalars(stmt.with_for_update() if lock else stmt).first()


def in_force(session: Session, cell: str, at: datetime) -> dict[str, ComparisonPin]:
    """``{subject: pin}`` of the cell as they stood at ``at``."""
    rows = session.scalars(
        select(ComparisonPin)
        .where(ComparisonPin.cell == cell, ComparisonPin.created_at <= at)
        .where(or_(ComparisonPin.retired_at.is_(None), ComparisonPin.retired_at > at))
        .order_by(ComparisonPin.series)
    )
    return {pin.subject: pin for pin in rows}


def point(pin: ComparisonPin) -> ComparisonPoint:
    return ComparisonPoint(
        subject=pin.subject,
        family=pin.family,
        cell=pin.cell,
        config=pin.config,
        series=pin.series,
        source=pin.source,
    )


def known_configs(subject: Subject) -> str:
    return ", ".join(subject.config_names) or "none declared"


def start_series(
    session: Session,
    subject: Subject,
    cell: str,
    config: str,
    *,
    source: str,
    reason: str,
    build_id: int | None = None,
    at: datetime | None = None,
) -> ComparisonPin | None:
    """Retire the pin in force and start the next series at ``config``; None when a racing
    transaction started one first (its pin stands)."""
    return _next_series(session, subject, cell, config, source, reason, build_id, at)[0]


def _next_series(
    session: Session,
    subject: Subject,
    cell: str,
    config: str,
    source: str,
    reason: str,
    build_id: int | None,
    at: datetime | None,
) -> tuple[ComparisonPin | None, ComparisonPin | None]:
    """(the series started, the pin it retired); (None, None) when a racing transaction started
    one first: the unique index of the pins in force refused this one."""
    at = at or utcnow()
    queue_behind_others(session, subject.name, cell)
    held = active(session, subject.name, cell, lock=True)
    newest = session.scalar(
        select(func.max(ComparisonPin.series)).where(
            ComparisonPin.subject == subject.name, ComparisonPin.cell == cell
        )
    )
    pin = ComparisonPin(
        subject=subject.name,
        family=family_of(cell),
        cell=cell,
        series=(newest or 0) + 1,
        config=config,
        definition=subject.definition,
        source=source,
        reason=reason,
        build_id=build_id,
        created_at=at,
    )
    try:
        with session.begin_nested():
            if held is not None:
                held.retired_at = at
            session.add(pin)
    except IntegrityError:
        return None, None
    log.info(
        "event=comparison_pinned subject=%s cell=%s series=%s config=%s source=%s",
        pin.subject,
        cell,
        pin.series,
        config,
        source,
    )
    return pin, held


def for_lease(session: Session, cell: str, at: datetime) -> list[ComparisonPoint]:
    """The cell's pins for a lease taken at ``at``. A pin whose subject's definition changed
    is retired first; a subject that declares its point gets it when it has none."""
    family = family_of(cell)
    for name, subject in SUBJECTS.items():
        if family not in subject.families:
            continue
        held = active(session, name, cell)
        if held is not None and held.definition == subject.definition:
            continue
        if held is not None and not subject.comparison:
            held.retired_at = at  # the next robust measurement chooses again
            reason = f"the subject's definition changed ({held.definition} -> {subject.definition})"
            log.info("event=comparison_retired subject=%s cell=%s %s", name, cell, reason)
        elif subject.comparison:
            why = "declared by the subject" + (
                "; its definition changed" if held is not None else ""
            )
            start_series(
                session, subject, cell, subject.comparison, source="declared", reason=why, at=at
            )
    return [point(pin) for pin in in_force(session, cell, at).values()]


def series_for(
    session: Session, job: Job, check: Check, measured: Mapping[str, Any]
) -> ComparisonPin | None:
    """The pin a job's measurement of ``subject`` belongs to, started here if the subject has
    none and the measurement qualifies; None when it joins no series.

    A measurement off the pin the job was leased with is refused (``OffPin``): the runner was
    told where to measure. One at a config the subject does not have is refused too.
    """
    subject = check.subject
    entry = SUBJECTS.get(subject)
    config = str(measured.get("config_name"))
    if entry is not None and entry.configs and config not in entry.config_names:
        raise UnknownConfig(
            f"{subject} has no config {config!r}; known configs: {known_configs(entry)}",
            detail={"subject": subject, "config": config, "known": list(entry.config_names)},
        )
    cell = cell_of(job)
    if cell is None or entry is None:
        return None
    held = in_force(session, cell, job.started_at or utcnow()).get(subject)
    if held is not None:
        if held.config != config:
            raise OffPin(
                f"{subject} on {cell}: the comparison was measured at {config}, but the "
                f"comparison point this job was leased with is {held.config} (series "
                f"{held.series}); nothing of this stage was stored",
                detail={"subject": subject, "cell": cell, "config": config, "pin": held.config},
            )
        return held
    current = active(session, subject, cell)
    if current is not None:  # pinned after this job was leased: it joins only at that config
        return current if current.config == config else None
    if history.robust_config(check.status, check.metrics) != config:
        return None
    control = check.metrics.get("control") or {}
    reason = (
        f"the first config whose control varied robustly: {control.get('varying')} of "
        f"{control.get('comparisons')} comparisons in build {job.build_id}"
    )
    return start_series(
        session, entry, cell, config, source="measured", reason=reason, build_id=job.build_id
    )


def repin(
    session: Session, subject: Subject, cell: str, config: str | None, reason: str
) -> tuple[ComparisonPin | None, ComparisonPin | None]:
    """An operator's re-pin: a new series at ``config``, or, without one, none until the next
    robust measurement (or the subject's declared point) chooses again. A re-pin that races
    another goes after it: each one a series of its own, one in force at the end.

    Returns (the series started, the one it retired); the first is None without ``config``, or
    when every attempt lost its race.
    """
    if config is not None and config not in subject.config_names:
        raise UnknownConfig(
            f"{subject.name} has no config {config!r}; known configs: {known_configs(subject)}",
            detail={"subject": subject.name, "config": config, "known": list(subject.config_names)},
        )
    why = f"re-pinned by an operator: {reason}" if reason else "re-pinned by an operator"
    if config is None:
        retired = retire_all(session, subject.name, cell)
        return None, retired[0] if retired else None
    for _ in range(REPIN_ATTEMPTS):
        pin, held = _next_series(session, subject, cell, config, "operator", why, None, None)
        if pin is not None:
            return pin, held
    return None, None


def retire_all(session: Session, subject: str, cell: str) -> list[ComparisonPin]:
    """Retire every pin of (subject, cell) in force (the newest first), so nothing is in force
    until the next robust measurement or the subject's declared point chooses again."""
    queue_behind_others(session, subject, cell)
    held = session.scalars(
        select(ComparisonPin)
        .where(ComparisonPin.subject == subject, ComparisonPin.cell == cell)
        .where(ComparisonPin.retired_at.is_(None))
        .order_by(ComparisonPin.series.desc())
        .with_for_update()
    ).all()
    at = utcnow()
    for pin in held:
        pin.retired_at = at
    return list(held)
