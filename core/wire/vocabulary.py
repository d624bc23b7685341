"""The words of the wire: stages, statuses, severities, verdicts, job kinds and states, build
statuses and the gate's conclusions; the one word every reader shows for a job's state
(``Shown``, ``job_word``); and ``WireModel``, the base of every model that crosses
between the service and the runner (unknown fields are ignored, so either side may add some).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Stage(StrEnum):
    build = "build"
    install = "install"
    probe = "probe"
    determinism = "determinism"
    numerics = "numerics"
    refusal = "refusal"


STAGE_ORDER: tuple[Stage, ...] = tuple(Stage)


class Status(StrEnum):
    """Outcome of a stage or a check."""

    pass_ = "pass"
    fail = "fail"
    inconclusive = "inconclusive"
    error = "error"
    timeout = "timeout"
    crashed = "crashed"
    skipped = "skipped"
    not_applicable = "not_applicable"


class Severity(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Verdict(StrEnum):
    pending = "pending"
    cancelled = "cancelled"
    fail = "fail"
    error = "error"
    inconclusive = "inconclusive"
    incomplete = "incomplete"
    pass_ = "pass"


class BuildSource(StrEnum):
    """Where a build's wheel comes from. ``wheel`` and ``release`` come with their wheel (no
    build job); ``commit`` and ``release`` builds are on a line (``Build.branch``): a commit's
    branch, or ``RELEASES`` for every release the watcher found on the package index."""

    wheel = "wheel"  # uploaded to POST /validate
    commit = "commit"  # a commit of the frontend's repository, built by a builder runner
    release = "release"  # a release the watcher took from the package index


RELEASES = "releases"  # the line of release builds
WHEEL_SOURCES = frozenset({BuildSource.wheel, BuildSource.release})


class JobKind(StrEnum):
    build = "build"
    cpu = "cpu"
    gpu = "gpu"


class JobState(StrEnum):
    waiting = "waiting"
    queued = "queued"
    leased = "leased"
    finished = "finished"
    cancelled = "cancelled"


class JobOutcome(StrEnum):
    """How an ended job ended; its human ``reason`` says why. None while the job is open."""

    ran = "ran"  # its runner finished it: its stages say the rest
    error = "error"  # it ended without its results (its runner said why, or was lost 3 times)
    skipped = "skipped"  # it never ran (no runner of its family in time, no wheel to run)
    cancelled = "cancelled"  # the build was cancelled


class BuildStatus(StrEnum):
    queued = "queued"
    running = "running"
    finished = "finished"
    cancelled = "cancelled"


class Shown(StrEnum):
    """The one word for a job's state: the grid's cells, the build page (its progress and its
    jobs), the live status and the API (a report's ``jobs[].shown``) all say it, so no page can
    call a job "waiting" that another calls "pending"."""

    pending = "pending"  # queued for a runner that is alive, or waiting for its build job's wheel
    waiting = "waiting"  # queued, and no alive runner can take it ("no runner with arch=...")
    running = "running"  # leased: a runner has it
    finished = "finished"  # its runner finished it; its stages say how they went
    skipped = "skipped"  # it never ran (no runner of its family in time, no wheel to run)
    error = "error"  # it ended without its results
    cancelled = "cancelled"  # the build was cancelled


def job_word(state: str, outcome: str | None, waiting: object = None) -> Shown:
    """The word for a job in ``state`` that ended with ``outcome`` (None while open);
    ``waiting`` is truthy for a queued job no alive runner can take (why it waits)."""
    if state == JobState.leased:
        return Shown.running
    if state == JobState.queued:
        return Shown.waiting if waiting else Shown.pending
    if state == JobState.waiting:
        return Shown.pending
    if state == JobState.cancelled or outcome == JobOutcome.cancelled:
        return Shown.cancelled
    if outcome == JobOutcome.skipped:
        return Shown.skipped
    if outcome == JobOutcome.error:
        return Shown.error
    return Shown.finished


class Conclusion(StrEnum):
    """What the gate says (``core/gate.py``): GitHub's check-run words, plus ``pending``."""

    success = "success"
    failure = "failure"
    neutral = "neutral"  # a required check did not run
    pending = "pending"  # a required check has still to run


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore", use_enum_values=False)
