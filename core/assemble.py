"""The build report from what its jobs reported: the one assembler.

The service (over its rows, converted to the wire's models) and ``fe-ci validate`` (over the
stages it ran) both call ``assemble``, so the two merge a build's findings and capabilities by
the same rules and conclude it by the same verdict and gate (``core/gate.py``). What each job
reported is handed in as ``Reported``, in the order it was stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core import gate
from core.wire import (
    BuildReport,
    Capability,
    DriftReport,
    Finding,
    RefusalReport,
    Stage,
    StageResult,
    SurfaceKnob,
)


@dataclass
class Reported:
    """What a build's jobs reported, in the order they reported it (a row's ``job_id`` is None
    for the line's findings, and for every row of ``fe-ci validate``'s one local job)."""

    findings: list[tuple[int | None, Finding]] = field(default_factory=list)
    capabilities: list[tuple[str, Capability]] = field(default_factory=list)
    drift: list[DriftReport] = field(default_factory=list)
    refusal: list[RefusalReport] = field(default_factory=list)
    # each probe's discovered surface, in job order; the build's is the first that found one
    surfaces: list[list[SurfaceKnob]] = field(default_factory=list)

    def add_stage(self, stage: StageResult, *, job_id: int | None, family: str | None) -> None:
        """One stage's result, as a job posted it."""
        self.findings += [(job_id, f) for f in stage.findings]
        self.capabilities += list(stage.capabilities.items())
        self.drift += [
            DriftReport.model_validate({**d.model_dump(), "job_id": job_id, "family": family})
            for d in stage.drift
        ]
        self.refusal += [
            RefusalReport.model_validate({**r.model_dump(), "job_id": job_id})
            for r in stage.refusal
        ]
        if stage.name == Stage.probe:
            self.surfaces.append(list(stage.surface))


def replaces(held_method: str | None, method: str | None, *, held: bool) -> bool:
    """Across a build's jobs (in the order they reported), which probe speaks for a subject: the
    first one, unless it could not read the knob (no method answered) and a later one could. The
    report and the grid both decide with this."""
    return not held or (bool(method) and not held_method)


def merge_capabilities(rows: Iterable[tuple[str, Capability]]) -> dict[str, Capability]:
    """One view per subject across jobs: a job that read the knob wins over one that could not.

    The build's capabilities in its report, and what the next build of its line is compared
    with, as ``fe-ci validate --previous REPORT.json`` compares with a report's.
    """
    out: dict[str, Capability] = {}
    for subject, cap in rows:
        held = out.get(subject)
        if replaces(held.method if held else None, cap.method, held=held is not None):
            out[subject] = cap
    return out


def once_per_build(rows: Iterable[tuple[int | None, Finding]]) -> list[Finding]:
    """One finding per (kind, severity, subject, message), with every job that reported it.

    Each job of a build probes the same wheel, so each posts the same probe findings; a reader
    needs them once. A finding with no job (the line's, or a local run's) lists no job.
    """
    out: dict[tuple[str, str, str | None, str], Finding] = {}
    for job_id, f in rows:
        key = (f.kind, f.severity, f.subject, f.message)
        held = out.get(key)
        if held is None:
            held = out[key] = f.model_copy(update={"job_ids": []})
        if job_id is not None and job_id not in held.job_ids:
            held.job_ids.append(job_id)
    return list(out.values())


def first_surface(surfaces: Iterable[list[SurfaceKnob]]) -> list[SurfaceKnob]:
    """A build's surface: the first of its probes that discovered one (each job probes the same
    build, so each finds the same)."""
    return next((list(s) for s in surfaces if s), [])


def assemble(head: BuildReport, reported: Reported, require: list[str]) -> BuildReport:
    """The report: ``head`` (the build, its status and its jobs' reports) with what the jobs
    reported merged once per build, concluded by the verdict and the gate ``require`` names."""
    report = head.model_copy(
        update={
            "capabilities": merge_capabilities(reported.capabilities),
            "findings": once_per_build(reported.findings),
            "drift": list(reported.drift),
            "refusal": list(reported.refusal),
            "surface": first_surface(reported.surfaces),
        }
    )
    return gate.conclude(report, require or [gate.ALL])
