"""What changed since the previous comparable build: deterministic bits and the cost of determinism.

Pure functions over the ``<subject>.deterministic`` check's metrics (``runner/inside/bits.py``
writes them), so the service (which has the history) and a local comparison share one rule.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.wire import BuildReport, Finding, HistoryRow, Severity, Stage

# What must match for two measurements to be compared: ``core.comparable.ComparableKey``
# (whose ``ConfigKey`` subset keys remembered configs) plus the inputs' identity.
KEY_FIELDS = ("subject", "config", "family", "gpu", "torch", "cudnn_backend", "inputs")
DEFAULT_COST_FACTOR = 1.25
SAMPLE_LIMIT = 128  # runner/inside/bits.py's SAMPLE_SIZE; a report may carry at most 4x that
MAX_OUTPUTS = 16


def comparable_key(fields: Mapping[str, Any], names: tuple[str, ...] = KEY_FIELDS) -> str:
    """A stable digest of ``fields`` restricted to ``names`` (missing ones count as None)."""
    parts = {name: fields.get(name) for name in names}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class _Sample(BaseModel):
    model_config = ConfigDict(strict=True)  # numbers as numbers: they are subtracted later

    stride: int = Field(ge=1)
    numel: int = Field(ge=0)
    values: list[float | None] = Field(max_length=4 * SAMPLE_LIMIT)


class _Cost(BaseModel):
    model_config = ConfigDict(strict=True)

    timer: str | None = Field(default=None, max_length=32)
    ratio: float | None = None


class _OutputState(BaseModel):
    distinct: int
    finite: bool


class _Measured(BaseModel):
    """What a runner reports for the next build to compare against, bounded: it comes from
    outside the service, and is stored and compared value by value."""

    config_name: str = Field(max_length=200)
    comparable: dict[str, str | None] = Field(max_length=len(KEY_FIELDS) + 8)
    digests: dict[str, str] = Field(min_length=1, max_length=MAX_OUTPUTS)
    sample: dict[str, _Sample] = Field(default_factory=dict, max_length=MAX_OUTPUTS)
    cost: _Cost = Field(default_factory=_Cost)
    outputs: dict[str, _OutputState] = Field(default_factory=dict, max_length=MAX_OUTPUTS)
    negative_control: bool = False


def comparable(metrics: Mapping[str, Any]) -> bool:
    """Only an exact deterministic arm, measured with its knob on, has bits worth comparing
    (and only a well-formed, bounded one: anything else is not compared)."""
    try:
        m = _Measured.model_validate(metrics)
    except ValidationError:
        return False
    long_text = any(len(v or "") > 300 for v in m.comparable.values())
    long_text = long_text or any(len(k) > 64 or len(v) > 128 for k, v in m.digests.items())
    return (
        not long_text
        and not m.negative_control
        and all(o.distinct == 1 and o.finite for o in m.outputs.values())
    )


def sample_max_abs_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> float | None:
    """Largest |a - b| over the sampled positions where both are finite; None if not comparable."""
    if not a or not b or (a.get("stride"), a.get("numel")) != (b.get("stride"), b.get("numel")):
        return None
    diffs = [
        abs(x - y)
        for x, y in zip(a.get("values") or [], b.get("values") or [], strict=False)
        if x is not None and y is not None
    ]
    return max(diffs) if diffs else None


@dataclass
class Comparison:
    bits: str  # "first" | "unchanged" | "changed"
    changed: dict[str, float | None] = field(default_factory=dict)
    cost_ratio: float | None = None
    previous_cost_ratio: float | None = None
    cost_regressed: bool = False
    findings: list[Finding] = field(default_factory=list)


def _ratio(metrics: Mapping[str, Any] | None) -> float | None:
    value = ((metrics or {}).get("cost") or {}).get("ratio")
    return float(value) if isinstance(value, int | float) else None


def compare(
    subject: str,
    current: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    previous_build: int | None,
    factor: float = DEFAULT_COST_FACTOR,
) -> Comparison:
    """This build's deterministic arm against the previous build that ran the same key."""
    ratio = _ratio(current)
    if previous is None:
        return Comparison(bits="first", cost_ratio=ratio)
    where = f"{subject} at {current.get('config_name')} on {current['comparable'].get('gpu')}"
    now, before = current.get("digests") or {}, previous.get("digests") or {}
    changed = {
        out: sample_max_abs_diff(
            (current.get("sample") or {}).get(out), (previous.get("sample") or {}).get(out)
        )
        for out in sorted(now)
        if before.get(out) != now[out]
    }
    out = Comparison(bits="changed" if changed else "unchanged", changed=changed, cost_ratio=ratio)
    if changed:
        parts = ", ".join(
            f"{o} (max |d| {d:.3g} on a sampled subset)" if d is not None else f"{o}"
            for o, d in changed.items()
        )
        out.findings.append(
            Finding(
                kind="deterministic_bits_changed",
                severity=Severity.warning,
                subject=subject,
                message=(
                    f"{where}: the deterministic arm's bytes differ from build {previous_build}: "
                    f"{parts}; a bit-exact run on that build does not reproduce on this one"
                ),
            )
        )
    out.previous_cost_ratio = _ratio(previous)
    if ratio is not None and out.previous_cost_ratio and ratio > out.previous_cost_ratio * factor:
        out.cost_regressed = True
        out.findings.append(
            Finding(
                kind="determinism_cost_regressed",
                severity=Severity.warning,
                subject=subject,
                message=(
                    f"{where}: the deterministic arm takes {ratio:.2f}x the control's median run "
                    f"time, {out.previous_cost_ratio:.2f}x in build {previous_build} "
                    f"(more than {factor:g}x growth)"
                ),
            )
        )
    return out


def _deterministic_checks(report: BuildReport) -> list[tuple[str | None, str, dict[str, Any]]]:
    """(family, subject, metrics) of each comparable ``<subject>.deterministic`` check."""
    return [
        (job.family, check.name.split(".", 1)[0], check.metrics)
        for job in report.jobs
        for stage in job.stages
        if stage.name == Stage.determinism
        for check in stage.checks
        if check.name.endswith(".deterministic") and comparable(check.metrics)
    ]


def compare_reports(
    current: BuildReport, previous: BuildReport, factor: float = DEFAULT_COST_FACTOR
) -> tuple[list[HistoryRow], list[Finding]]:
    """``fe-ci validate --previous``: the same comparison as the service, between two reports."""
    before = {
        comparable_key(metrics["comparable"]): metrics
        for _family, _subject, metrics in _deterministic_checks(previous)
    }
    rows: list[HistoryRow] = []
    findings: list[Finding] = []
    for family, subject, metrics in _deterministic_checks(current):
        prev = before.get(comparable_key(metrics["comparable"]))
        found = compare(subject, metrics, prev, previous.id if prev else None, factor)
        rows.append(
            HistoryRow(
                family=family,
                subject=subject,
                config=metrics.get("config_name"),
                bits=found.bits,
                changed=found.changed,
                previous_build_id=previous.id if prev else None,
                cost_ratio=found.cost_ratio,
                previous_cost_ratio=found.previous_cost_ratio,
                cost_regressed=found.cost_regressed,
                timer=(metrics.get("cost") or {}).get("timer"),
            )
        )
        findings += found.findings
    return rows, findings
