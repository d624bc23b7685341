"""The documents a stage writes inside the candidate: one definition, checked where it is read.

Standard library only. Each stage module (``probe``, ``determinism``, ``refusal``) returns one
JSON document of the shape below; ``_io.run_stage`` writes it, or an ``ErrorDoc`` when the stage
raised. The runner reads it as untrusted input: ``problems(stage, doc)`` names every unknown or
missing key, and the pipeline turns any into a stage ``error`` with the reason.
``core/wire/results.py`` mirrors the parts the runner carries on (``Check``, ``Finding``,
``Capability``, ``DriftRow``, ``RefusalRow``, ``StageResult``);
``tests/functional/test_documents.py`` keeps the two in step.
"""

# No ``from __future__ import annotations``: TypedDict reads NotRequired from evaluated annotations.
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict


class CheckDoc(TypedDict):
    name: str
    status: str
    detail: str
    metrics: NotRequired[dict[str, Any]]


class FindingDoc(TypedDict):
    kind: str
    severity: str
    subject: str | None
    message: str


class CapabilityDoc(TypedDict):
    importable: bool
    knob: str
    present: bool
    default: str | None
    method: str | None
    error: str | None
    entry_point: str


class KnobDoc(TypedDict):
    """One knob of the build's determinism surface (``runner/inside/discovery.py``)."""

    entry_point: str
    knob: str
    default: str | None
    kind: str  # "parameter" | "torch_flag" | "op_schema"
    method: str  # "ast" | "docstring" | "schema"


class DriftDoc(TypedDict):
    subject: str
    output: str
    arm: str
    runs: int
    differing: int
    distinct: int
    max_abs_diff: float | None
    finite: bool
    config: dict[str, Any]
    luck_probability: float | None
    stopped_by: str | None


class RefusalRowDoc(TypedDict):
    activation: str
    request: str
    scale_bias: bool
    fc1_bias: bool
    unit_scale: bool
    expected: str
    observed: str
    status: str
    detail: str
    call_kwargs: dict[str, Any]
    # for the stage's own log, not carried on by the runner
    kwargs: dict[str, Any]
    state: dict[str, Any]
    te: NotRequired[str]


# Keys of a refusal row that the runner does not carry on (the wire's RefusalRow lacks them).
REFUSAL_ROW_LOCAL = frozenset({"kwargs", "state", "te"})
# Fields of the wire's models that no stage document carries: the runner (a check's repro line,
# core/repro.py) or the service (the jobs that saw a finding) fills them in.
WIRE_ONLY: dict[str, frozenset[str]] = {
    "Check": frozenset({"repro"}),
    "Finding": frozenset({"job_ids"}),
}


class StageDoc(TypedDict):
    status: str
    reason: str
    checks: list[CheckDoc]
    findings: list[FindingDoc]


class ErrorDoc(TypedDict):
    """What a stage that could not judge the build writes (``_io.run_stage`` on an exception)."""

    status: str  # "error"
    reason: str
    checks: NotRequired[list[CheckDoc]]
    findings: NotRequired[list[FindingDoc]]
    log_tail: NotRequired[str]
    timings: NotRequired[dict[str, dict[str, float | int | bool | None]]]


class ProbeDoc(StageDoc):
    version: str | None
    module_version: str | None
    capabilities: dict[str, CapabilityDoc]
    features: dict[str, bool | None]
    surface: list[KnobDoc]
    surface_read: dict[str, Any]  # files read, unparsed, truncated, seconds: the runner's log
    environment: dict[str, Any]
    unread: list[str]


class NumericsDoc(TypedDict):
    status: str
    reason: str
    checks: list[CheckDoc]


class DeterminismDoc(StageDoc):
    drift: list[DriftDoc]
    numerics: NumericsDoc
    chosen_configs: dict[str, str]
    timings: dict[str, dict[str, float | int | bool | None]]  # wire.StageResult.timings
    negative_control: bool
    family: str | None
    compile_cache: dict[str, Any]
    start_configs: dict[str, Any]
    comparison_points: dict[str, Any]
    environment: dict[str, Any]
    # the refusal stage's document (a ``RefusalDoc`` or an ``ErrorDoc``), where the runner asked
    # for the frontend's own rows in this process; the runner checks it as the refusal stage's
    frontend_refusal: NotRequired[dict[str, Any]]


class RefusalDoc(StageDoc):
    refusal: list[RefusalRowDoc]
    knobs: dict[str, dict[str, Any]]
    # made in the determinism stage's process: {"stage": {"rows_s", "in_determinism_process"}}
    timings: NotRequired[dict[str, dict[str, float | int | bool | None]]]


STAGE_DOCS: dict[str, type] = {
    "probe": ProbeDoc,
    "determinism": DeterminismDoc,
    "refusal": RefusalDoc,
}

# The keys of a stage document the wire's StageResult carries (its other keys stay with the
# runner: the probe's features and environment, the determinism stage's chosen configs, ...).
STAGE_RESULT_KEYS = frozenset(
    {"status", "reason", "checks", "findings", "capabilities", "drift", "refusal", "version"}
    | {"surface"}
    | {"log_tail", "timings"}
)

# The documents inside a document, by the key that holds them: a list of them, a mapping of
# names to them, or one.
_NESTED: dict[str, tuple[str, type]] = {
    "checks": ("list", CheckDoc),
    "findings": ("list", FindingDoc),
    "drift": ("list", DriftDoc),
    "refusal": ("list", RefusalRowDoc),
    "capabilities": ("mapping", CapabilityDoc),
    "surface": ("list", KnobDoc),
    "numerics": ("one", NumericsDoc),
}
_MAX_PROBLEMS = 5


def keys(doc_type: type) -> tuple[frozenset[str], frozenset[str]]:
    """(required keys, optional keys) of one document type."""
    required: frozenset[str] = doc_type.__required_keys__  # type: ignore[attr-defined]
    optional: frozenset[str] = doc_type.__optional_keys__  # type: ignore[attr-defined]
    return required, optional


def _check(doc: Any, doc_type: type, where: str, out: list[str]) -> None:
    if not isinstance(doc, Mapping):
        out.append(f"{where} is {type(doc).__name__}, not an object")
        return
    required, optional = keys(doc_type)
    unknown = sorted(str(k) for k in doc if k not in required | optional)
    missing = sorted(required - set(doc))
    if unknown:
        out.append(f"{where} has unknown keys {unknown}")
    if missing:
        out.append(f"{where} lacks keys {missing}")
    for key, (shape, inner) in _NESTED.items():
        if key not in doc or key not in required | optional:
            continue
        value, at = doc[key], f"{where}.{key}" if where else key
        if shape == "one":
            _check(value, inner, at, out)
        elif shape == "list" and isinstance(value, list):
            for i, item in enumerate(value):
                _check(item, inner, f"{at}[{i}]", out)
                if len(out) >= _MAX_PROBLEMS:
                    return
        elif shape == "mapping" and isinstance(value, Mapping):
            for name, item in value.items():
                _check(item, inner, f"{at}[{str(name)[:40]!r}]", out)
                if len(out) >= _MAX_PROBLEMS:
                    return
        else:
            out.append(f"{at} is {type(value).__name__}, not a {shape}")


def problems(stage: str, doc: Any) -> list[str]:
    """Every unknown or missing key of ``stage``'s document (the first few); [] when it is sound.

    A document whose status is ``error`` may be an ``ErrorDoc``: a stage that could not judge
    the build need not fill in the rest.
    """
    out: list[str] = []
    if isinstance(doc, Mapping) and doc.get("status") == "error":
        _check(doc, ErrorDoc, "the document", out)
        if not out:
            return []
        out = []
    _check(doc, STAGE_DOCS[stage], "the document", out)
    return [p.replace("the document.", "") for p in out[:_MAX_PROBLEMS]]
