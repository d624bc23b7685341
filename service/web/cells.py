"""What one dashboard cell says: a state (its colour), its text, and the reason shown on hover.

Pure functions over small row views, so the grid (50 builds from a handful of queries), the build
page and the live endpoint all name a state the same way. Beyond the stage statuses of the wire
models a cell can be ``pending``, ``running``, ``waiting`` (a queued job no alive runner can take:
"waiting for an sm_100 runner") or ``cancelled``: a job's word is ``core.wire.job_word``'s,
the one the build page and the API (a report's ``jobs[].shown``) say too. A stage's cell shows
its worst check, so a stage that reported ``pass`` with a failing check inside, or whose error
finding failed the build (a probe's ledger finding), is never green. ``alive`` is
``service.jobs.capable.alive``'s set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from core.subjects import FAMILIES, SUBJECTS
from core.verdict import OPEN_JOBS, RAN, WORST_FIRST, finding_stage, no_runner, why_uncovered
from core.wire import (
    WHEEL_SOURCES,
    JobKind,
    JobState,
    Shown,
    Stage,
    Status,
    Verdict,
    job_word,
)
from core.wire.results import subject_of
from service.jobs.capable import waiting_reason

# Worst first: the state a cell shows when several jobs or checks disagree. The statuses keep
# core.verdict's order; work underway ranks just above skipped, cancelled just below it.
_SKIPPED_AT = WORST_FIRST.index(Status.skipped)
_SEVERITY = (
    *WORST_FIRST[:_SKIPPED_AT],
    "running",
    "waiting",
    "pending",
    Status.skipped,
    "cancelled",
    *WORST_FIRST[_SKIPPED_AT + 1 :],
)
_RANK: dict[str, int] = {s: i for i, s in enumerate(_SEVERITY)}


@dataclass(frozen=True)
class Cell:
    state: str
    text: str
    reason: str = ""

    @classmethod
    def of(cls, state: str, reason: str = "") -> Cell:
        return cls(state, state.replace("_", " "), reason)


@dataclass
class StageView:
    job_id: int
    name: str
    status: str
    reason: str
    duration_s: float
    created_at: datetime | None = None
    worst_check: tuple[str, str] | None = None  # (status, "name: detail") of its worst check


@dataclass
class JobView:
    id: int
    build_id: int
    kind: str
    family: str | None
    stages: list[str]
    state: str
    outcome: str | None
    reason: str
    attempt: int
    runner: str | None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    rows: dict[str, StageView] = field(default_factory=dict)
    cell: str | None = None  # a GPU job's cell of the matrix (core/cells.py)

    @property
    def label(self) -> str:
        where = self.cell or self.family
        return f"{self.kind} {where}" if where else str(self.kind)


@dataclass
class CheckView:
    job_id: int
    name: str
    status: str
    detail: str

    @property
    def subject(self) -> str:
        return subject_of(self.name)


@dataclass
class CapView:
    subject: str
    importable: bool
    present: bool
    error: str | None
    knob: str


def worst(states: Iterable[str]) -> str:
    return min(states, key=lambda s: _RANK.get(s, len(_RANK)))


def waiting_text(family: str | None) -> str:
    return f"waiting for an {family} runner" if family else "waiting for a runner"


def job_stage_cell(job: JobView, stage: str, alive: set[str]) -> Cell | None:
    """One job's view of one stage, or None where the job does not run that stage."""
    row = job.rows.get(stage)
    if row is not None:
        check = row.worst_check
        if check is not None and worst((check[0], row.status)) != row.status:
            return Cell.of(check[0], check[1])
        return Cell.of(row.status, row.reason)
    if stage not in job.stages:
        return None
    why = (
        waiting_reason(job.kind, job.family, alive, job.cell)
        if job.state == JobState.queued
        else None
    )
    word = job_word(job.state, job.outcome, why)
    if word == Shown.running:
        first_open = next((s for s in job.stages if s not in job.rows), None)
        if stage == first_open:
            who = f" on {job.runner}" if job.runner else ""
            return Cell.of("running", f"{job.label} job, attempt {job.attempt}{who}")
        return Cell.of("pending", f"after {first_open}")
    if word == Shown.waiting:
        return Cell("waiting", waiting_text(job.family), f"{why}; the job is queued")
    if word == Shown.pending:
        if job.state == JobState.waiting:
            return Cell.of("pending", "waiting for the build job's wheel")
        return Cell.of("pending", f"queued (attempt {job.attempt})")
    if word == Shown.cancelled:
        return Cell.of("cancelled", job.reason or "cancelled")
    if word == Shown.error:
        return Cell.of("error", job.reason)
    return Cell.of("skipped", job.reason or "the job ended without reporting this stage")


def job_cell(job: JobView, alive: set[str]) -> Cell:
    """A whole job's state in its one word (``core.wire.job_word``), with why on hover."""
    why = (
        waiting_reason(job.kind, job.family, alive, job.cell)
        if job.state == JobState.queued
        else None
    )
    word = job_word(job.state, job.outcome, why)
    if word == Shown.waiting:
        return Cell("waiting", "waiting", why or "")
    if word == Shown.pending and job.state == JobState.waiting:
        return Cell.of(word, "waiting for the build job's wheel")
    return Cell.of(word, job.reason)


def combine(cells: list[tuple[str, Cell]]) -> list[Cell]:
    """Per-job cells of one stage: identical ones collapse, each keeps which job said what."""
    merged: dict[tuple[str, str], list[tuple[str, Cell]]] = {}
    for label, cell in cells:
        merged.setdefault((cell.state, cell.text), []).append((label, cell))
    out = []
    for (state, text), group in merged.items():
        reason = "; ".join(f"{label}: {c.reason}" if c.reason else label for label, c in group)
        out.append(Cell(state, text, reason))
    return sorted(out, key=lambda c: _RANK.get(c.state, len(_RANK)))


def with_findings(cells: list[Cell], stage: str, errors: Iterable[tuple[str, str]]) -> list[Cell]:
    """A stage's cells where an error finding of that stage (``(kind, message)``) failed the
    build: a cell that says ``pass`` says ``fail`` with the finding as its reason."""
    mine = [f"{kind}: {message}" for kind, message in errors if finding_stage(kind) == stage]
    if not mine:
        return cells
    why = "; ".join(mine)
    return [Cell("fail", "fail", f"{why} ({c.reason})") if c.state == "pass" else c for c in cells]


def stage_cells(
    *,
    source: str,
    cancelled: bool,
    stage: str,
    jobs: Sequence[JobView],
    alive: set[str],
    errors: Iterable[tuple[str, str]] = (),
) -> list[Cell]:
    """The cell(s) of a build's stage column; ``errors`` are the build's error findings."""
    found = [(j.label, c) for j in jobs if (c := job_stage_cell(j, stage, alive)) is not None]
    if found:
        return with_findings(combine(found), stage, errors)
    if cancelled:
        return [Cell.of("cancelled", "the build was cancelled")]
    if stage == Stage.build:
        has_wheel = source in WHEEL_SOURCES
        why = "a wheel needs no build" if has_wheel else "the wheel of this commit exists"
        return [Cell.of("not_applicable", why)]
    if stage in (Stage.determinism, Stage.numerics) and jobs:
        if any(j.state in OPEN_JOBS for j in jobs):  # not skipped while the build still runs
            return [Cell.of("pending", f"no GPU job; once the build ends: {no_runner(FAMILIES)}")]
        return [Cell.of("skipped", no_runner(FAMILIES))]
    return [Cell.of("pending", "no job yet")]


def _subject_from_checks(checks: list[CheckView]) -> Cell | None:
    covered = [c for c in checks if c.status in RAN]
    if covered:
        state = worst(c.status for c in covered)
        reasons = [c.detail for c in covered if c.status == state]
        return Cell.of(state, reasons[0] if reasons else "")
    return None


def subject_cell(
    name: str,
    *,
    cancelled: bool,
    jobs: Sequence[JobView],
    checks: list[CheckView],
    cap: CapView | None,
    alive: set[str],
) -> Cell:
    """A subject's determinism verdict across the build's jobs (covered on any job counts)."""
    got = _subject_from_checks(checks)
    if got is not None:
        return got
    if cancelled:
        return Cell.of("cancelled", "the build was cancelled")
    families = SUBJECTS[name].families if name in SUBJECTS else ()
    if cap is not None and not (cap.importable and cap.present):
        why = cap.error if not cap.importable else f"this build has no '{cap.knob}'"
        return Cell.of("not_applicable", why or "not in this build")
    active = [
        j for j in jobs if j.kind == JobKind.gpu and j.family in families and j.state in OPEN_JOBS
    ]
    if any(j.state == JobState.leased for j in active):
        runner = next(j.runner for j in active if j.state == JobState.leased)
        return Cell.of("running", f"on {runner}" if runner else "")
    queued = [j for j in active if j.state == JobState.queued]
    if queued and not any(j.family in alive for j in queued):
        family = queued[0].family
        return Cell("waiting", waiting_text(family), f"no runner with arch={family} is alive")
    if active:
        return Cell.of("pending", "queued")
    why = why_uncovered(name, checks)  # the report's rule (its ``not_run``), check for check
    if why is None:  # none ran (above), so each said it cannot apply
        return Cell.of("not_applicable", checks[0].detail)
    if cap is None and not checks:
        if any(j.state in OPEN_JOBS for j in jobs):
            return Cell.of("pending", "not probed yet")
        return Cell.of("skipped", "not run: no probe result")
    return Cell.of("skipped", why)


GATE_STATES = {"success": "pass", "failure": "fail", "neutral": "incomplete", "pending": "pending"}


def gate_cell(conclusion: str, reason: str) -> Cell:
    """The gate's conclusion in its own word, coloured as the verdict it stands for."""
    return Cell(GATE_STATES[conclusion], str(conclusion), reason)


def verdict_cell(verdict: str, reason: str, jobs: Sequence[JobView]) -> Cell:
    if verdict == Verdict.pending and any(j.state == JobState.leased for j in jobs):
        return Cell.of("running", reason)
    return Cell.of(verdict, reason)
