"""Comparison points: read every series, and an operator's re-pin (admin token).

``GET /api/pins`` lists the pins of every subject and family, the one in force and the retired
ones (each a series whose records stay readable); ``POST /api/pins/{family}/{subject}`` starts a
new series at a config of the subject, or, with no config, retires the pin so that the next
robust measurement (or the subject's declared point) chooses again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from core import bounds
from core.subjects import FAMILIES, SUBJECTS
from service.deps import SessionDep, require_admin
from service.errors import BadRequest, NotFound
from service.models import ComparisonPin
from service.results import pins

router = APIRouter(prefix="/api/pins", tags=["pins"])

Name = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class PinPublic(BaseModel):
    subject: str
    family: str
    series: int
    config: str
    source: str  # "measured" | "declared" | "operator"
    reason: str
    build_id: int | None
    created_at: datetime
    retired_at: datetime | None
    in_force: bool
    definition_current: bool  # the subject's definition is still the one the pin was made for


class PinsPublic(BaseModel):
    items: list[PinPublic]


class PinCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: str | None = Field(default=None, max_length=200)  # None: choose again by measuring
    reason: Annotated[str, StringConstraints(max_length=500), bounds.Storable] = ""


class PinChange(BaseModel):
    pin: PinPublic | None  # the new series; None when the pin was only retired
    retired: PinPublic | None  # the series it ended, if one was in force


def _public(pin: ComparisonPin) -> PinPublic:
    subject = SUBJECTS.get(pin.subject)
    return PinPublic(
        subject=pin.subject,
        family=pin.family,
        series=pin.series,
        config=pin.config,
        source=pin.source,
        reason=pin.reason,
        build_id=pin.build_id,
        created_at=pin.created_at,
        retired_at=pin.retired_at,
        in_force=pin.retired_at is None,
        definition_current=subject is not None and subject.definition == pin.definition,
    )


@router.get("", response_model=PinsPublic)
def read_pins(
    session: SessionDep,
    family: Annotated[str | None, Query(max_length=16)] = None,
    subject: Annotated[str | None, Query(max_length=64)] = None,
) -> PinsPublic:
    """Every series of every comparison point, newest first."""
    stmt = select(ComparisonPin).order_by(ComparisonPin.id.desc()).limit(1000)
    if family is not None:
        stmt = stmt.where(ComparisonPin.family == family)
    if subject is not None:
        stmt = stmt.where(ComparisonPin.subject == subject)
    return PinsPublic(items=[_public(p) for p in session.scalars(stmt)])


@router.post(
    "/{family}/{subject}",
    response_model=PinChange,
    status_code=201,
    dependencies=[Depends(require_admin)],
)
def create_pin(family: Name, subject: Name, body: PinCreate, session: SessionDep) -> PinChange:
    """Re-pin a subject's comparison point on a family: a new series starts (admin token)."""
    entry = SUBJECTS.get(subject)
    if entry is None:
        raise NotFound(f"no subject {subject!r}; subjects: {', '.join(SUBJECTS)}")
    if family not in FAMILIES or family not in entry.families:
        raise BadRequest(
            f"{subject} does not run on {family!r}; its families: {', '.join(entry.families)}"
        )
    pin, held = pins.repin(session, entry, family, body.config, body.reason)
    if body.config is not None and pin is None:
        raise BadRequest("another re-pin of this comparison point came first; read it and retry")
    session.commit()
    return PinChange(
        pin=_public(pin) if pin else None, retired=_public(held) if held is not None else None
    )
