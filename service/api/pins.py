"""Comparison points: read every series, and an operator's re-pin (admin token).

``GET /api/pins`` lists the pins of every subject and cell of the matrix (``core.cells``: a
family's host cell is named as the family, ``sm_90``; another backend's adds it,
``sm_90-cudnn9.28.1``), the one in force and the retired ones (each a series whose records stay
readable); ``POST /api/pins/{cell}/{subject}`` starts a new series at a config of the subject on
that cell alone, or, with no config, retires the pin so that the next robust measurement (or the
subject's declared point) chooses again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from core import bounds, cells
from core.subjects import FAMILIES, SUBJECTS
from service.deps import SessionDep, require_admin
from service.errors import BadRequest, NotFound
from service.models import ComparisonPin
from service.results import pins

router = APIRouter(prefix="/api/pins", tags=["pins"])

Name = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class PinPublic(BaseModel):
    subject: str
    family: str  # the cell's family
    cell: str  # the cell of the matrix the pin is kept for
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
        cell=pin.cell,
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
    cell: Annotated[str | None, Query(max_length=cells.CELL_CHARS)] = None,
) -> PinsPublic:
    """Every series of every comparison point, newest first (``family``: all of its cells)."""
    stmt = select(ComparisonPin).order_by(ComparisonPin.id.desc()).limit(1000)
    if family is not None:
        stmt = stmt.where(ComparisonPin.family == family)
    if cell is not None:
        stmt = stmt.where(ComparisonPin.cell == cell)
    if subject is not None:
        stmt = stmt.where(ComparisonPin.subject == subject)
    return PinsPublic(items=[_public(p) for p in session.scalars(stmt)])


def _cell(name: str, subject: str) -> str:
    """The cell a re-pin names, checked: a family the subject runs on, a backend the matrix
    knows."""
    entry = SUBJECTS[subject]
    try:
        cell = cells.Cell.parse(name)
    except ValueError as exc:
        raise BadRequest(f"{exc}; {subject} runs on {', '.join(entry.families)}") from exc
    if cell.family not in FAMILIES or cell.family not in entry.families:
        raise BadRequest(
            f"{subject} does not run on {cell.family!r}; its families: {', '.join(entry.families)}"
        )
    if cell.cudnn != cells.HOST and not cells.is_known(cell.cudnn):
        raise BadRequest(
            f"{name!r}: unknown cuDNN backend {cell.cudnn}; known: {', '.join(cells.known_names())}"
        )
    return cell.name


@router.post(
    "/{cell}/{subject}",
    response_model=PinChange,
    status_code=201,
    dependencies=[Depends(require_admin)],
)
def create_pin(cell: Name, subject: Name, body: PinCreate, session: SessionDep) -> PinChange:
    """Re-pin a subject's comparison point on one cell (a family's name: its host cell): a new
    series starts there, and no other cell's pin changes (admin token)."""
    entry = SUBJECTS.get(subject)
    if entry is None:
        raise NotFound(f"no subject {subject!r}; subjects: {', '.join(SUBJECTS)}")
    pin, held = pins.repin(session, entry, _cell(cell, subject), body.config, body.reason)
    if body.config is not None and pin is None:
        raise BadRequest("another re-pin of this comparison point came first; read it and retry")
    session.commit()
    return PinChange(
        pin=_public(pin) if pin else None, retired=_public(held) if held is not None else None
    )
