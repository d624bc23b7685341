"""What changed since the previous comparable build: deterministic bits and the cost of determinism.

Pure functions over the ``<subject>.deterministic`` check's ``comparison`` (measured at the
subject's comparison point, ``runner/inside/comparison.py``), so the service (which has the
history) and a local comparison share one rule. The cost gate learns its band from the series:
``cost_band``.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.kinds import FindingKind
from core.wire import BuildReport, ComparisonPoint, Finding, HistoryRow, Severity, Stage

# What must match for two measurements to be compared: ``core.comparable.ComparableKey``
# (whose ``ConfigKey`` subset keys remembered configs) plus the inputs' identity.
KEY_FIELDS = ("subject", "config", "family", "gpu", "torch", "cudnn_backend", "inputs")
DEFAULT_COST_FACTOR = 1.25
COST_WINDOW = 10  # the genuine builds of a series whose cost ratios make the band
BAND_SIGMAS = 3.0  # the band reaches this many robust standard deviations above the median
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation per median absolute deviation
# the fewest builds whose MAD is robust: with two, one build is half the sample and its
# excursion alone sets the spread (a noisy subject's slow first build would open the band)
SPREAD_MIN_BUILDS = 3
ROBUST_SHARE = 0.5  # a comparison point is chosen where the control varied in this share or more
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


def measurement(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a ``<subject>.deterministic`` check offers the next build: its ``comparison``, or,
    in a report from before comparison points, the check's own metrics."""
    doc = metrics.get("comparison")
    return doc if isinstance(doc, Mapping) else metrics


def comparable(metrics: Mapping[str, Any]) -> bool:
    """Only an exact deterministic arm, measured with its knob on, has bits worth comparing
    (and only a well-formed, bounded one: anything else is not compared). ``metrics`` is a
    check's ``measurement``."""
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


def robust_config(status: str, metrics: Mapping[str, Any]) -> str | None:
    """The config a ``<subject>.deterministic`` check's walk settled on, if its control varied
    robustly there (the check passed, knob on, the control varying in at least ``ROBUST_SHARE``
    of its comparisons): a comparison point worth keeping. None otherwise."""
    control = metrics.get("control") or {}
    share = control.get("share")
    config = metrics.get("config_name")
    if status != "pass" or metrics.get("negative_control") or not isinstance(config, str):
        return None
    return config if isinstance(share, int | float) and share >= ROBUST_SHARE else None


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


@dataclass(frozen=True)
class CostBand:
    """Where the cost of determinism of genuine builds lies, learned from a series of ratios.

    ``limit`` = max(``factor`` x median, median + ``BAND_SIGMAS`` x 1.4826 x MAD): a build above
    it is flagged. The median and the median absolute deviation are robust: one slow genuine
    build neither moves the band much nor hides a slower one. With fewer than
    ``SPREAD_MIN_BUILDS`` builds the MAD is not (one of two builds sets it alone), and the band
    is the floor alone (``factor`` x the median).
    """

    builds: int
    median: float
    mad: float
    limit: float
    factor: float

    def describe(self) -> str:
        spread = BAND_SIGMAS * MAD_TO_SIGMA * self.mad
        seen = (
            f"the last {self.builds} genuine build{'s' if self.builds != 1 else ''} at this "
            f"comparison point took a median {self.median:.2f}x (MAD {self.mad:.3f}); limit "
            f"{self.limit:.2f}x = "
        )
        if self.builds < SPREAD_MIN_BUILDS:
            return seen + (
                f"{self.factor:g}x the median (the spread counts from {SPREAD_MIN_BUILDS} builds)"
            )
        return seen + (
            f"the larger of {self.factor:g}x the median ({self.factor * self.median:.2f}x) and "
            f"the median + {BAND_SIGMAS:g} x 1.4826 MAD ({self.median + spread:.2f}x)"
        )


def cost_band(series: Sequence[float], factor: float = DEFAULT_COST_FACTOR) -> CostBand | None:
    """The band of the newest ``COST_WINDOW`` ratios of ``series`` (oldest first); None if empty."""
    window = [r for r in series if r > 0][-COST_WINDOW:]
    if not window:
        return None
    median = statistics.median(window)
    mad = statistics.median(abs(r - median) for r in window)
    spread = BAND_SIGMAS * MAD_TO_SIGMA * mad if len(window) >= SPREAD_MIN_BUILDS else 0.0
    limit = max(factor * median, median + spread)
    return CostBand(builds=len(window), median=median, mad=mad, limit=limit, factor=factor)


@dataclass
class Comparison:
    bits: str  # "first" | "unchanged" | "changed"
    changed: dict[str, float | None] = field(default_factory=dict)
    cost_ratio: float | None = None
    previous_cost_ratio: float | None = None
    cost_regressed: bool = False
    band: CostBand | None = None
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
    series: Sequence[float] | None = None,
) -> Comparison:
    """This build's measurement against the previous build that ran the same key.

    ``series`` holds the cost ratios of the genuine earlier builds of the key (oldest first;
    none flagged), which the cost gate's band is learned from; without it, the previous build's.
    """
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
                kind=FindingKind.deterministic_bits_changed,
                severity=Severity.warning,
                subject=subject,
                message=(
                    f"{where}: the deterministic arm's bytes differ from build {previous_build}: "
                    f"{parts}; a bit-exact run on that build does not reproduce on this one"
                ),
            )
        )
    out.previous_cost_ratio = _ratio(previous)
    if series is None:
        series = [out.previous_cost_ratio] if out.previous_cost_ratio else []
    out.band = cost_band(series, factor)
    if ratio is not None and out.band is not None and ratio > out.band.limit:
        out.cost_regressed = True
        was = f"{out.previous_cost_ratio:.2f}x" if out.previous_cost_ratio else "not timed"
        out.findings.append(
            Finding(
                kind=FindingKind.determinism_cost_regressed,
                severity=Severity.warning,
                subject=subject,
                message=(
                    f"{where}: the deterministic arm takes {ratio:.2f}x the control's median run "
                    f"time, above the noise band: {out.band.describe()}; build {previous_build} "
                    f"took {was}"
                ),
            )
        )
    return out


def _deterministic_checks(report: BuildReport) -> list[tuple[str | None, str, Mapping[str, Any]]]:
    """(family, subject, measurement) of each comparable ``<subject>.deterministic`` check."""
    return [
        (job.family, check.subject, measurement(check.metrics))
        for job in report.jobs
        for stage in job.stages
        if stage.name == Stage.determinism
        for check in stage.checks
        if check.name.endswith(".deterministic") and comparable(measurement(check.metrics))
    ]


def comparison_points(report: BuildReport, cell: str | None = None) -> list[ComparisonPoint]:
    """The configs a report's comparisons were measured at, as a lease's pins (``fe-ci validate
    --previous``: the new run compares at the same points); ``cell``: only that cell's (a
    report of a matrix measured each cell at its own)."""
    return [
        ComparisonPoint(
            subject=check.subject,
            family=job.family,
            cell=job.cell_name,
            config=str(measurement(check.metrics).get("config_name")),
        )
        for job in report.jobs
        if job.family is not None and (cell is None or job.cell_name == cell)
        for stage in job.stages
        if stage.name == Stage.determinism
        for check in stage.checks
        if check.name.endswith(".deterministic") and comparable(measurement(check.metrics))
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
                **band_fields(found.band),
            )
        )
        findings += found.findings
    return rows, findings


def band_fields(band: CostBand | None) -> dict[str, Any]:
    """A history row's view of the cost band."""
    if band is None:
        return {}
    return {"cost_median": band.median, "cost_limit": band.limit, "cost_builds": band.builds}
