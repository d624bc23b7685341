"""Server-rendered dashboard pages; they read the same data layer as the JSON API.

``/`` the grid, ``/builds/{id}`` one build (and its JUnit XML), ``/trends``, ``/runners``, and the
live status of a running build (``/builds/{id}/events`` as server-sent events,
``/builds/{id}/live.json`` for a poll).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from itertools import groupby, product
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select

from core.subjects import SUBJECTS
from core.verdict import missed_stages
from core.wire import STAGE_ORDER, RefusalReport, Status, Verdict
from service.api.bisections import of_build
from service.deps import CursorQuery, IdPath, SessionDep, SettingsDep
from service.errors import NotFound
from service.models import Build, Runner, utcnow
from service.results import logs, stored_reports
from service.web import badge, bisections, compare, live, runners, trends
from service.web.cells import GATE_STATES
from service.web.junit import junit_xml
from service.web.queries import PAGE_SIZE, grid_page, load_jobs
from service.web.templating import HERE, elide_common, not_found, templates, timed

router = APIRouter(include_in_schema=False)
router.include_router(live.router)
router.include_router(trends.router)
router.include_router(runners.router)
router.include_router(bisections.router)
router.include_router(badge.router)
router.include_router(compare.router)

VERDICTS = [v.value for v in Verdict]


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


@router.get("/", response_class=HTMLResponse)
def read_grid(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    cursor: CursorQuery = None,
    source: Annotated[str | None, Query(pattern="^(wheel|commit|release)?$")] = None,
    branch: Annotated[str | None, Query(max_length=300)] = None,
    verdict: Annotated[str | None, Query(pattern=f"^({'|'.join(VERDICTS)})?$")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = PAGE_SIZE,
) -> HTMLResponse:
    """The grid of builds by stage and by subject, newest first."""
    started = time.perf_counter()
    now = utcnow()
    page = grid_page(
        session,
        settings,
        now,
        cursor=cursor,
        source=source,
        branch=branch,
        verdict=verdict,
        limit=limit,
    )
    filters = {
        "source": source,
        "branch": branch,
        "verdict": verdict,
        "limit": limit if limit != PAGE_SIZE else None,
    }
    response = templates.TemplateResponse(
        request,
        "grid.html",
        {
            "page": page,
            "filters": filters,
            "cursor": cursor,
            "verdicts": VERDICTS,
            "stages": [s.value for s in STAGE_ORDER],
            "subjects": list(SUBJECTS),
            "names": elide_common(
                [r.filename for r in page.rows if r.filename and r.source == "wheel"]
            ),
            "live": any(r.status in ("queued", "running") for r in page.rows),
            "now": now,
        },
    )
    return timed(response, started)


REFUSAL_COLUMNS = list(product((False, True), repeat=3))  # scale bias, FC1 bias, unit scale
CAUSES_SHOWN = 6  # on the first screen; the rest behind "N more"


@dataclass
class RefusalMatrix:
    """Refusal rows as activation x request by scale bias x FC1 bias x unit scale, shown once
    for every job whose rows were the same."""

    job_ids: list[int]
    rows: list[RefusalReport]
    lines: list[tuple[str, str, list[RefusalReport | None]]]
    labels: list[str]

    @property
    def counts(self) -> list[tuple[str, int]]:
        return sorted(Counter(r.status.value for r in self.rows).items())

    @property
    def label(self) -> str:
        same = " (the same rows)" if len(self.labels) > 1 else ""
        return ", ".join(self.labels) + same


def _outcome(r: RefusalReport) -> tuple[object, ...]:
    return (r.activation, r.request, r.scale_bias, r.fc1_bias, r.unit_scale, r.expected,
            r.observed, r.status, r.detail)  # fmt: skip


def _refusal_matrices(rows: list[RefusalReport], jobs: dict[int, str]) -> list[RefusalMatrix]:
    """One matrix per distinct set of rows: jobs that decided every row alike share one."""
    out: dict[tuple[tuple[object, ...], ...], RefusalMatrix] = {}
    key = lambda r: r.job_id or 0  # noqa: E731
    for job_id, group in groupby(sorted(rows, key=key), key):
        found = list(group)
        label = jobs.get(job_id, f"job {job_id}") if job_id else "job"
        same = tuple(sorted(_outcome(r) for r in found))
        if same in out:
            out[same].job_ids.append(job_id)
            out[same].labels.append(label)
            continue
        at = {(r.activation, r.request, r.scale_bias, r.fc1_bias, r.unit_scale): r for r in found}
        pairs = list(dict.fromkeys((r.activation, r.request) for r in found))
        lines = [
            (a, q, [at.get((a, q, sb, fb, us)) for sb, fb, us in REFUSAL_COLUMNS]) for a, q in pairs
        ]
        out[same] = RefusalMatrix([job_id], found, lines, [label])
    return list(out.values())


@router.get("/builds/{build_id}", response_class=HTMLResponse)
def read_build_page(
    request: Request, session: SessionDep, settings: SettingsDep, build_id: IdPath
) -> Response:
    """One build: verdict, gate, causes and what did not run first; then provenance, jobs,
    capabilities, findings, stages, drift, refusal and logs, each collapsible."""
    started = time.perf_counter()
    build = session.get(Build, build_id)
    if build is None:
        return _not_found(request, f"No build {build_id}.")
    now = utcnow()
    report = stored_reports.current(session, build, settings)
    views = {j.id: j for j in load_jobs(session, [build_id]).get(build_id, [])}
    names = [j.runner for j in report.jobs if j.runner]
    labels = {
        r.name: r.labels for r in session.scalars(select(Runner).where(Runner.name.in_(names)))
    }
    snapshot = live.snapshot(session, settings, build_id, now)
    job_labels = {j.id: f"{j.cell_name or j.kind.value} job {j.id}" for j in report.jobs if j.id}
    refusal = _refusal_matrices(report.refusal, job_labels)
    for m in refusal:  # a GPU job that reused a job's decisions is named beside that job's
        m.labels += [
            f"{job_labels[j.id]} (reused)"
            for j in report.jobs
            if j.id and j.refusal_from in m.job_ids
        ]
    response = templates.TemplateResponse(
        request,
        "build.html",
        {
            "b": report,
            "build": build,
            "jobs": views,
            "labels": labels,
            "snap": snapshot,
            "refusal": refusal,
            "refusal_broken": any(r.status != Status.pass_ for r in report.refusal),
            "refusal_columns": REFUSAL_COLUMNS,
            "gate_states": GATE_STATES,
            "causes_shown": CAUSES_SHOWN,
            "missed": missed_stages(report),
            "subjects": SUBJECTS,
            "now": now,
            "bisection": of_build(session, build),
            "logs": logs.views(report, logs.of_build(session, build_id)),
        },
    )
    return timed(response, started)


@router.get("/builds/{build_id}/junit.xml")
def read_build_junit(session: SessionDep, settings: SettingsDep, build_id: IdPath) -> Response:
    """The build's results as JUnit XML: one testcase per check."""
    build = session.get(Build, build_id)
    if build is None:
        raise NotFound(f"no build {build_id}")
    body = junit_xml(stored_reports.current(session, build, settings))
    headers = {"Content-Disposition": f'attachment; filename="fe-ci-build-{build_id}-junit.xml"'}
    return Response(body, media_type="application/xml", headers=headers)


def _not_found(request: Request, message: str) -> HTMLResponse:
    return not_found(request, message)
