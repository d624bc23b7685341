"""What a runner reports of one stage: its checks, findings, capabilities, drift and refusal rows,
timings, and the environment the job ran in.

``Check``, ``Finding``, ``Capability``, ``DriftRow``, ``RefusalRow`` and ``StageResult`` mirror the
documents a stage writes inside the candidate (``runner/inside/documents.py``): a field added here
is added there (``tests/functional/test_documents.py`` keeps the two in step). Every text, number
and list is bounded (``core/bounds.py``): a runner's report is hostile input.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from core import bounds
from core.bounds import Count, JsonObject, Name, Short, Text, Word
from core.wire.vocabulary import Severity, Stage, Status, WireModel


def subject_of(check_name: str) -> str:
    """The subject a check's name is about: its name up to the first dot."""
    return check_name.partition(".")[0]


class Check(WireModel):
    name: Name
    status: Status
    detail: Text = ""
    metrics: JsonObject = Field(default_factory=dict)
    repro: Text | None = None  # failing or inconclusive: the one command that reproduces it

    @property
    def subject(self) -> str:
        """The subject the check is about (``sdpa_bwd`` of ``sdpa_bwd.deterministic``)."""
        return subject_of(self.name)

    @property
    def aspect(self) -> str:
        """What of its subject it checked (``deterministic`` of ``sdpa_bwd.deterministic``)."""
        return self.name.partition(".")[2]


class Finding(WireModel):
    kind: Short
    severity: Severity
    subject: Short | None = None
    message: Text
    # in a build report: the jobs that saw it
    job_ids: list[int] = Field(default_factory=list, max_length=1000)


class Capability(WireModel):
    """What the probe learned about one subject of one build."""

    importable: bool
    knob: Short
    present: bool
    default: bounds.Phrase | None = None
    # "signature" | "docstring" | None when nothing could be read
    method: bounds.Word | None = None
    error: Text | None = None
    entry_point: Name = ""


class SurfaceKnob(WireModel):
    """One knob of a build's determinism surface, as its probe discovered it
    (``runner/inside/discovery.py``): names and defaults are the candidate's text, bounded."""

    entry_point: Name
    knob: Name
    default: Name | None = None
    kind: bounds.Word  # "parameter" | "torch_flag" | "op_schema"
    method: bounds.Word  # "ast" | "docstring" | "schema"


class DriftRow(WireModel):
    subject: Short
    output: bounds.Term
    arm: bounds.Word  # "control" | "deterministic"
    runs: Count
    differing: Count
    distinct: Count
    max_abs_diff: Annotated[bounds.Finite, Field(ge=0.0)] | None
    finite: bool
    config: JsonObject = Field(default_factory=dict)
    luck_probability: bounds.Probability | None = None
    stopped_by: bounds.Term | None = None


class RefusalRow(WireModel):
    activation: bounds.Word
    request: bounds.Term
    scale_bias: bool
    fc1_bias: bool
    unit_scale: bool
    expected: bounds.Word
    observed: bounds.Word
    status: Status
    detail: Text = ""
    call_kwargs: JsonObject = Field(default_factory=dict)  # what the wrapper was called with


TimingValue = bounds.Finite | int | bool | None
Timings = Annotated[
    dict[Short, Annotated[dict[Short, TimingValue], Field(max_length=32)]],
    Field(max_length=32),
]


class StageResult(WireModel):
    name: Stage
    status: Status
    reason: Text = ""
    duration_s: bounds.Seconds = 0.0
    checks: list[Check] = Field(default_factory=list, max_length=2000)
    findings: list[Finding] = Field(default_factory=list, max_length=500)
    capabilities: dict[Short, Capability] = Field(default_factory=dict, max_length=64)
    drift: list[DriftRow] = Field(default_factory=list, max_length=2000)
    refusal: list[RefusalRow] = Field(default_factory=list, max_length=1000)
    # the probe: the build's determinism surface, read from its source and signatures
    surface: list[SurfaceKnob] = Field(default_factory=list, max_length=400)
    # the version the installed build reports (install/probe)
    version: bounds.Phrase | None = None
    log_tail: bounds.LogText = ""
    # where the stage's seconds went (determinism: {"stage": {...}, <subject>: {phase: s}}, as
    # ``runner.inside.determinism.run`` documents); bounded, numbers and flags only
    timings: Timings = Field(default_factory=dict)


class Environment(WireModel):
    python: Name | None = None
    torch: Name | None = None
    gpu: Name | None = None
    arch: Short | None = None
    cudnn_backend: Short | None = None
    cutlass_dsl: Name | None = None
    sandbox: Name = "none"
    # the cuDNN backend the job asked for (a layer's version; None: the host's), and which
    # libcudnn each of torch and the frontend had loaded in the stage process (/proc/self/maps)
    cudnn_requested: Short | None = None
    libcudnn: dict[Word, Annotated[list[Name], Field(max_length=8)]] = Field(
        default_factory=dict, max_length=4
    )


def undeclared_configs(result: StageResult) -> bounds.Undeclared | None:
    """A config a check or drift row of ``result`` names that its subject does not declare: the
    next lease of the family would otherwise start from whatever a runner made up."""
    named = [(c.subject, bounds.config_names(c.metrics)) for c in result.checks]
    named += [(d.subject, [d.config["name"]] if "name" in d.config else []) for d in result.drift]
    found = (bounds.undeclared(subject, names) for subject, names in named)
    return next((bad for bad in found if bad is not None), None)
