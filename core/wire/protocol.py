"""The runner protocol's messages: register, resume, go offline, claim a job (its lease), post a
stage's result with its log, heartbeat, finish. These models are the protocol's door: what a runner
sends is bounded here (``core/bounds.py``) and refused whole with a 422 past it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from core import bounds
from core.bounds import Text
from core.subjects import FAMILIES
from core.wire.results import Environment, StageResult
from core.wire.vocabulary import JobKind, Stage, WireModel


class RunnerRegister(WireModel):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")
    labels: bounds.Labels = Field(default_factory=dict)
    # Take the name over from a runner that is still alive (its token stops working), as
    # GitHub's runner ``--replace`` does; without it a live runner's name is refused (409).
    replace: bool = False


class RunnerRegistered(WireModel):
    runner_id: int
    name: str
    token: str


class RunnerResume(WireModel):
    """A runner restarted on its host, back under the token it kept (``runner/agent/state.py``)."""

    labels: bounds.Labels = Field(default_factory=dict)
    # Jobs whose finished results the runner kept and will send: their leases stay; every other
    # job leased to the runner belonged to its previous process and is handed back.
    holding: list[int] = Field(default_factory=list, max_length=1000)


class RunnerResumed(WireModel):
    runner_id: int
    name: str
    handed_back: list[int] = Field(default_factory=list)


class RunnerOffline(WireModel):
    """A runner stopping cleanly; ``holding`` as in ``RunnerResume``."""

    holding: list[int] = Field(default_factory=list, max_length=1000)


class ClaimRequest(WireModel):
    wait_s: float = Field(default=0.0, ge=0.0, le=30.0)


class RememberedConfig(WireModel):
    """A config chosen by an earlier build, remembered per (subject, family, GPU model, backend).

    A lease carries every one of its family's; the determinism stage uses those whose GPU model
    and cuDNN backend match the host it runs on (``core.comparable``).
    """

    subject: bounds.Short
    family: bounds.Word
    gpu: bounds.Name | None = None
    cudnn_backend: bounds.Short | None = None
    config: bounds.Name
    build_id: int | None = None

    @model_validator(mode="after")
    def _declared(self) -> RememberedConfig:
        """Only a config the subject declares, of a family there is, is remembered or leased."""
        if self.family not in FAMILIES:
            raise ValueError(f"{self.family!r} is not a GPU family ({', '.join(FAMILIES)})")
        if bad := bounds.undeclared(self.subject, [self.config]):
            raise ValueError(str(bad))
        return self


class ComparisonPoint(WireModel):
    """A subject's comparison point on a cell of the matrix (``core.cells``; a lease carries its
    own cell's): every build measures the deterministic arm's bits and the cost of determinism
    there, wherever its detection walk goes. ``family`` is the cell's, which a runner of the
    previous version keys the points by."""

    subject: bounds.Short
    family: bounds.Word
    config: bounds.Name
    cell: bounds.Short | None = None  # None: the family's host cell
    series: int | None = None  # a re-pin or a new definition of the subject starts the next
    # "measured" | "declared" | "operator"
    source: bounds.Word = "measured"


class JobLease(WireModel):
    job_id: int
    build_id: int
    kind: JobKind
    family: str | None
    attempt: int
    lease_token: str
    lease_expires_at: datetime
    lease_seconds: int
    wheel_url: str | None
    wheel_filename: str | None
    wheel_sha256: str | None
    version: str | None
    stages: list[Stage]
    repo: str | None = None
    commit: str | None = None
    artifact_url: str | None = None  # build jobs upload the wheel here
    start_configs: list[RememberedConfig] = Field(default_factory=list)  # gpu jobs
    subjects: list[str] | None = None  # only these subjects (a bisection step); None: all
    comparison: list[ComparisonPoint] = Field(default_factory=list)  # gpu jobs: the pins
    # the refusal stage's rows: "all", or "frontend": only the frontend's own refusal rows, the
    # consumer's rows being the CPU job's decisions, reused (service/jobs/refusal_reuse.py)
    refusal_scope: Literal["all", "frontend"] = "all"
    # whether the probe reads the build's surface from its source: not where the build's CPU
    # job reads it (the same wheel, read the same way; service/jobs/surface_reuse.py)
    probe_surface: bool = True
    # the build's source is trusted (a commit of the configured repository, built by fe-ci's
    # own builder): the service decides; only then may its compiled kernels be shared by source
    trusted_source: bool = False
    # a GPU job's cell (core/cells.py) and the cuDNN backend it runs on: None is the host's own;
    # a version (``9.28.1``) is installed as a layer and loaded by the stages in its place
    cell: str | None = None
    cudnn: str | None = None


class LeasedPost(WireModel):
    lease_token: str = Field(min_length=1, max_length=200)


class HeartbeatAck(WireModel):
    lease_expires_at: datetime
    cancelled: bool = False


# A stage's runner log travels with its result, cut to its last this many characters.
LOG_MAX_CHARS = 64 * 1024
StageLog = Annotated[
    str, bounds.log_text(LOG_MAX_CHARS), Field(json_schema_extra={"maxLength": LOG_MAX_CHARS})
]


class StagePost(LeasedPost):
    result: StageResult
    log: StageLog | None = None  # the stage's log, its end


class JobFinish(LeasedPost):
    environment: Environment = Field(default_factory=Environment)
    error: Text | None = None
