"""A build report's coverage of its determinism surface: which knob its jobs exercised, which
they only compiled, which nothing covered (``core/surface.py`` says how a knob maps to a subject).

A subject counts as exercised on a family when a job of that family ran its determinism check
(pass, fail or inconclusive: it ran); compiled when a determinism stage compiled its kernels for
a GPU it does not have (``<subject>.<knob>`` skipped with a passing compile-only result);
refusal-only when no subject covers it and a GPU job's refusal stage ran the frontend refusal
row of it (``frontend_refusal.<row>``, pass or fail: it ran).
"""

from __future__ import annotations

from core import surface
from core.frontend_refusals import CHECK_PREFIX
from core.wire import BuildReport, Coverage, CoverageRow, Stage, Status

_RAN = frozenset({Status.pass_, Status.fail, Status.inconclusive})


def refused_of(report: BuildReport) -> dict[str, set[str]]:
    """Frontend refusal row -> the GPU families whose refusal stage ran it (pass or fail)."""
    refused: dict[str, set[str]] = {}
    prefix = f"{CHECK_PREFIX}."
    for job in report.jobs:
        for stage in job.stages:
            if stage.name != Stage.refusal or not job.family:
                continue
            for check in stage.checks:
                if check.name.startswith(prefix) and check.status in _RAN:
                    refused.setdefault(check.name[len(prefix) :], set()).add(job.family)
    return refused


def of_report(report: BuildReport) -> Coverage:
    exercised: dict[str, set[str]] = {}
    compiled: set[str] = set()
    for job in report.jobs:
        for stage in job.stages:
            if stage.name != Stage.determinism:
                continue
            for check in stage.checks:
                subject, what = check.subject, check.aspect
                if "." in what:
                    continue
                if check.status in _RAN and job.family:
                    exercised.setdefault(subject, set()).add(job.family)
                compile_only = check.metrics.get("compile_only")
                if isinstance(compile_only, dict) and compile_only.get("status") == "pass":
                    compiled.add(subject)
    knobs = [k.model_dump() for k in report.surface]
    rows = surface.coverage(knobs, exercised, compiled, refused_of(report))
    return Coverage(
        summary=surface.summary(rows) if rows else "",
        rows=[CoverageRow.model_validate(r) for r in rows],
    )
