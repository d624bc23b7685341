"""The words of the wire: stages, statuses, severities, verdicts, job kinds and states, build
statuses and the gate's conclusions; and ``WireModel``, the base of every model that crosses
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


class Conclusion(StrEnum):
    """What the gate says (``core/gate.py``): GitHub's check-run words, plus ``pending``."""

    success = "success"
    failure = "failure"
    neutral = "neutral"  # a required check did not run
    pending = "pending"  # a required check has still to run


class WireModel(BaseModel):
    model_config = ConfigDict(extra="ignore", use_enum_values=False)
