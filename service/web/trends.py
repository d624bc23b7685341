"""``/trends``: per subject, across builds, the control arm's variation and the deterministic arm's
verdict, and stage durations, as server-rendered SVG (no JavaScript needed)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core import cells
from core.subjects import FAMILIES, SUBJECTS
from core.verdict import NOT_RUN
from core.wire import STAGE_ORDER, Stage
from service.deps import SessionDep
from service.models import (
    CheckRow,
    ComparisonPin,
    DeterminismRecord,
    Job,
    StageRow,
    StoredDriftRow,
)
from service.web import trend_axis
from service.web.templating import templates, timed

router = APIRouter(include_in_schema=False)

WIDTH, HEIGHT = 640, 160
PAD_L, PAD_R, PAD_T, PAD_B = 58, 34, 10, 38  # the x axis: two lines, version and date
FAMILY_COLOURS = {"sm_80": "#7a5cc4", "sm_90": "#1f6fd1", "sm_100": "#d16f1f", None: "#556070"}
STAGE_COLOURS = {
    "build": "#7a5cc4",
    "install": "#556070",
    "probe": "#1f9e8f",
    "determinism": "#1f6fd1",
    "numerics": "#d16f1f",
    "refusal": "#b8336a",
}
VERDICT_LETTER = {
    "pass": "P",
    "fail": "F",
    "inconclusive": "I",
    "error": "E",
    "timeout": "T",
    "crashed": "C",
    "skipped": "S",
    "not_applicable": "-",
}


@dataclass
class Point:
    x: float
    y: float
    title: str


@dataclass
class Series:
    label: str
    colour: str
    points: list[Point] = field(default_factory=list)

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass
class Mark:
    x: float
    y: float
    state: str
    letter: str
    title: str


@dataclass
class Marker:
    """A vertical line where a new series of a comparison point starts."""

    x: float
    label: str
    title: str


@dataclass
class Chart:
    title: str
    builds: list[int]
    y_max: float
    y_unit: str
    series: list[Series] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)  # row labels of a mark strip
    labels: dict[int, tuple[str, str]] = field(default_factory=dict)  # build: version, date
    markers: list[Marker] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT

    def x(self, build_id: int) -> float:
        span = self.width - PAD_L - PAD_R
        if len(self.builds) < 2:
            return PAD_L + span / 2
        return PAD_L + span * self.builds.index(build_id) / (len(self.builds) - 1)

    def y(self, value: float) -> float:
        span = self.height - PAD_T - PAD_B
        return PAD_T + span * (1 - min(value, self.y_max) / (self.y_max or 1))

    @property
    def y_ticks(self) -> list[tuple[float, str]]:
        fmt = {"share": "{:.0%}", "ratio": "{:.2f}x"}.get(self.y_unit, "{:.3g} s")
        return [(self.y(v), fmt.format(v)) for v in (0, self.y_max / 2, self.y_max)]

    @property
    def x_ticks(self) -> list[tuple[float, str, str]]:
        """(x, the build's version or commit, its date) for at most about eight builds."""
        step = max(1, math.ceil(len(self.builds) / (8 if self.width > 500 else 5)))
        return [(self.x(b), *self.labels.get(b, (f"#{b}", ""))) for b in self.builds[::step]]

    @property
    def empty(self) -> bool:
        return not self.series and not self.marks


def _colour(cell: str | None) -> str:
    """A cell's colour is its family's (``core.cells``: ``sm_90-cudnn9.28.1`` is sm_90's)."""
    return FAMILY_COLOURS.get(cells.family_of(cell), "#556070")


def control_chart(session: Session, subject: str, builds: list[int]) -> Chart:
    chart = Chart(f"{subject}: control arm (knob off), differing / runs", builds, 1.0, "share")
    cell = func.coalesce(Job.cell, StoredDriftRow.family)  # a series per cell of the matrix
    stmt = (
        select(
            StoredDriftRow.build_id,
            cell,
            func.max(StoredDriftRow.differing * 1.0 / StoredDriftRow.runs),
            func.max(StoredDriftRow.runs),
            func.max(StoredDriftRow.differing),
        )
        .outerjoin(Job, Job.id == StoredDriftRow.job_id)
        .where(StoredDriftRow.subject == subject, StoredDriftRow.arm == "control")
        .where(StoredDriftRow.build_id.in_(builds), StoredDriftRow.runs > 0)
        .group_by(StoredDriftRow.build_id, cell)
        .order_by(StoredDriftRow.build_id)
    )
    by_family: dict[str | None, Series] = {}
    for build_id, family, share, runs, differing in session.execute(stmt):
        series = by_family.setdefault(family, Series(family or "?", _colour(family)))
        title = f"build {build_id} {family}: {differing} of {runs} runs differ ({share:.0%})"
        series.points.append(Point(chart.x(build_id), chart.y(float(share)), title))
    chart.series = [by_family[f] for f in sorted(by_family, key=str)]
    return chart


def deterministic_chart(session: Session, subject: str, builds: list[int]) -> Chart:
    """One row of marks per cell (a family on a cuDNN backend): the ``<subject>.deterministic``
    check's status per build."""
    stmt = (
        select(Job.build_id, func.coalesce(Job.cell, Job.family), CheckRow.status, CheckRow.detail)
        .join(StageRow, StageRow.id == CheckRow.stage_id)
        .join(Job, Job.id == StageRow.job_id)
        .where(Job.build_id.in_(builds), StageRow.name == Stage.determinism)
        .where(CheckRow.name == f"{subject}.deterministic")
        .where(CheckRow.status.not_in(sorted(NOT_RUN)))
    )
    found = list(session.execute(stmt))
    families = sorted({f for _, f, _, _ in found}, key=str)
    chart = Chart(
        f"{subject}: deterministic arm (knob on), verdict",
        builds,
        1.0,
        "marks",
        height=PAD_T + PAD_B + 22 * max(1, len(families)),
    )
    chart.rows = [f or "?" for f in families]
    for build_id, family, status, detail in found:
        row = families.index(family)
        chart.marks.append(
            Mark(
                chart.x(build_id),
                PAD_T + 22 * row + 11,
                status,
                VERDICT_LETTER.get(status, "?"),
                f"build {build_id} {family}: {status}: {detail[:300]}",
            )
        )
    return chart


def cost_chart(session: Session, subject: str, builds: list[int]) -> Chart:
    """Per cell and comparison-point series: median deterministic-arm run time over median
    control-arm run time at the comparison point; a marker where a new series starts."""
    stmt = (
        select(
            DeterminismRecord.build_id,
            func.coalesce(Job.cell, DeterminismRecord.family),
            DeterminismRecord.cost_ratio,
            DeterminismRecord.config,
            DeterminismRecord.timer,
            ComparisonPin.series,
        )
        .outerjoin(ComparisonPin, ComparisonPin.id == DeterminismRecord.pin_id)
        .outerjoin(Job, Job.id == DeterminismRecord.job_id)
        .where(DeterminismRecord.subject == subject, DeterminismRecord.build_id.in_(builds))
        .where(DeterminismRecord.cost_ratio.is_not(None))
        .where(DeterminismRecord.copied.is_(False))  # a rerun's copy: drawn once, at its build
        .order_by(DeterminismRecord.build_id, DeterminismRecord.id)
    )
    found = [(b, f, float(r or 0.0), c, t, n) for b, f, r, c, t, n in session.execute(stmt)]
    y_max = max([row[2] for row in found] + [1.0]) * 1.1
    title = f"{subject}: cost of determinism (deterministic / control run time)"
    chart = Chart(title, builds, y_max, "ratio")
    by_series: dict[tuple[str, int], Series] = {}
    for build_id, family, ratio, config, timer, number in found:
        label = f"{family or '?'} series {number} at {config}" if number else family or "?"
        series = by_series.setdefault((str(family), number or 0), Series(label, _colour(family)))
        title = f"build {build_id} {family} at {config}: {ratio:.2f}x ({timer})"
        series.points.append(Point(chart.x(build_id), chart.y(ratio), title))
    chart.series = [by_series[k] for k in sorted(by_series)]
    chart.markers = [
        Marker(chart.x(build_id), f"series {pin.series}", f"{label}: {pin.reason}")
        for build_id, pin, label in series_starts(session, subject, builds)
    ]
    return chart


def series_starts(
    session: Session, subject: str, builds: list[int]
) -> list[tuple[int, ComparisonPin, str]]:
    """(first build, pin, text) of each comparison-point series after the first that starts
    among ``builds``: where the trends page marks that comparisons started afresh."""
    first = (
        select(DeterminismRecord.pin_id, func.min(DeterminismRecord.build_id).label("build_id"))
        .where(DeterminismRecord.subject == subject, DeterminismRecord.pin_id.is_not(None))
        .where(DeterminismRecord.copied.is_(False))
        .group_by(DeterminismRecord.pin_id)
        .subquery()
    )
    stmt = (
        select(first.c.build_id, ComparisonPin)
        .join(ComparisonPin, ComparisonPin.id == first.c.pin_id)
        .where(ComparisonPin.series > 1, first.c.build_id.in_(builds))
        .order_by(first.c.build_id)
    )
    out = []
    for build_id, pin in session.execute(stmt):
        text = f"{pin.cell} {subject}: series {pin.series} at {pin.config} from #{build_id}"
        out.append((build_id, pin, text))
    return out


def bits_by_build(session: Session, builds: list[int]) -> dict[int, list[tuple[str, str]]]:
    """Per build: (``cell subject``, bits) for each deterministic arm compared."""
    stmt = (
        select(
            DeterminismRecord.build_id,
            func.coalesce(Job.cell, DeterminismRecord.family),
            DeterminismRecord.subject,
            DeterminismRecord.bits,
        )
        .outerjoin(Job, Job.id == DeterminismRecord.job_id)
        .where(DeterminismRecord.build_id.in_(builds), DeterminismRecord.copied.is_(False))
        .order_by(DeterminismRecord.build_id, DeterminismRecord.id)
    )
    out: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for build_id, family, subject, bits in session.execute(stmt):
        out[build_id].append((f"{family or '?'} {subject}", bits))
    return dict(out)


def duration_charts(session: Session, builds: list[int]) -> list[Chart]:
    """One small chart per stage (each on its own scale): the longest job's duration per build."""
    stmt = (
        select(Job.build_id, StageRow.name, func.max(StageRow.duration_s))
        .join(Job, Job.id == StageRow.job_id)
        .where(Job.build_id.in_(builds))
        .group_by(Job.build_id, StageRow.name)
        .order_by(Job.build_id)
    )
    by_stage: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for build_id, name, duration in session.execute(stmt):
        by_stage[name].append((build_id, float(duration)))
    charts = []
    for stage in STAGE_ORDER:
        found = by_stage.get(stage.value)
        if not found:
            continue
        y_max = max(d for _, d in found) or 1.0
        chart = Chart(f"{stage.value} (s)", builds, y_max, "seconds", width=420, height=130)
        series = Series(stage.value, STAGE_COLOURS[stage.value])
        for build_id, duration in found:
            title = f"build {build_id} {stage.value}: {duration:.1f} s"
            series.points.append(Point(chart.x(build_id), chart.y(duration), title))
        chart.series = [series]
        charts.append(chart)
    return charts


@router.get("/trends", response_class=HTMLResponse)
def read_trends(
    request: Request,
    session: SessionDep,
    builds: Annotated[int, Query(ge=2, le=200)] = 40,
) -> HTMLResponse:
    """Drift and durations across the newest builds, per subject."""
    started = time.perf_counter()
    ids = trend_axis.recent_builds(session, builds)
    charts = defaultdict(list)
    starts: dict[str, list[tuple[int, ComparisonPin, str]]] = {}
    if ids:
        for name in SUBJECTS:
            charts[name] = [
                control_chart(session, name, ids),
                deterministic_chart(session, name, ids),
                cost_chart(session, name, ids),
            ]
            starts[name] = series_starts(session, name, ids)
    on_axis = ids or trend_axis.timed_builds(session, builds)  # stage times show without drift too
    durations = duration_charts(session, on_axis) if on_axis else []
    labels = trend_axis.axis_labels(session, on_axis) if on_axis else {}
    for chart in [*durations, *(c for group in charts.values() for c in group)]:
        chart.labels = labels
    response = templates.TemplateResponse(
        request,
        "trends.html",
        {
            "ids": ids,
            "charts": dict(charts),
            "durations": durations,
            "versions": trend_axis.versions(session, ids),
            "bits": bits_by_build(session, ids) if ids else {},
            "series_starts": starts,
            "limit": builds,
            "families": FAMILIES,
            "subject_families": {name: s.families for name, s in SUBJECTS.items()},
            "dims": {"l": PAD_L, "r": PAD_R, "t": PAD_T, "b": PAD_B},
        },
    )
    return timed(response, started)
