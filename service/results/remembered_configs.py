"""Remembered configs: written when a GPU job finishes, read into the next lease of its family."""

from __future__ import annotations

import logging

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core import remembered
from core.wire import Check, Environment, RememberedConfig, Stage, Status
from service.models import ChosenConfig, Job, StageRow, utcnow
from service.results.assemble import stored

log = logging.getLogger("fe_ci.memory")

# A lease carries the most recently chosen rows of its family: every GPU model and backend of a
# fleet, bounded however many backends the family has seen.
MAX_IN_LEASE = 200


def remember(session: Session, job: Job) -> list[RememberedConfig]:
    """Store the configs this finished GPU job's determinism stage chose (newest build wins)."""
    row = session.scalars(
        select(StageRow)
        .where(StageRow.job_id == job.id, StageRow.name == Stage.determinism)
        .options(selectinload(StageRow.checks))
    ).first()
    if row is None or job.family is None:
        return []
    checks = [
        stored(
            Check, name=c.name, status=Status(c.status), detail=c.detail, metrics=c.metrics or {}
        )
        for c in row.checks
    ]
    chosen = remembered.chosen(
        checks,
        family=job.family,
        environment=stored(Environment, **(job.environment or {})),
        build_id=job.build_id,
    )
    for entry in chosen:
        held = session.scalars(
            select(ChosenConfig).where(
                ChosenConfig.subject == entry.subject,
                ChosenConfig.family == entry.family,
                ChosenConfig.gpu == (entry.gpu or ""),
                ChosenConfig.cudnn_backend == (entry.cudnn_backend or ""),
            )
        ).first()
        if held is None:
            held = ChosenConfig(
                subject=entry.subject,
                family=entry.family,
                gpu=entry.gpu or "",
                cudnn_backend=entry.cudnn_backend or "",
            )
            session.add(held)
        elif held.build_id is not None and held.build_id > job.build_id:
            continue  # a newer build already chose: an older one finishing late does not undo it
        held.config, held.build_id, held.updated_at = entry.config, job.build_id, utcnow()
        log.info(
            "event=config_remembered subject=%s family=%s gpu=%s backend=%s config=%s build=%s",
            entry.subject,
            entry.family,
            entry.gpu,
            entry.cudnn_backend,
            entry.config,
            job.build_id,
        )
    return chosen


def start_configs(session: Session, family: str | None) -> list[RememberedConfig]:
    """Every config remembered for the family; the runner keeps those of its GPU and backend."""
    if family is None:
        return []
    rows = session.scalars(
        select(ChosenConfig)
        .where(ChosenConfig.family == family)
        .order_by(ChosenConfig.updated_at.desc(), ChosenConfig.id.desc())
        .limit(MAX_IN_LEASE)
    )
    out = []
    for r in rows:
        try:  # a row stored before configs were checked, or of a config since removed
            out.append(
                RememberedConfig(
                    subject=r.subject,
                    family=r.family,
                    gpu=r.gpu or None,
                    cudnn_backend=r.cudnn_backend or None,
                    config=r.config,
                    build_id=r.build_id,
                )
            )
        except ValidationError:
            log.info("event=config_not_leased subject=%s config=%.80r", r.subject, r.config)
    return out
