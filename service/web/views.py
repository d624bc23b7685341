"""Server-rendered dashboard pages; they read the same data layer as the JSON API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from runner.wire import STAGE_ORDER
from service.api.builds import get_build, list_builds
from service.deps import SessionDep
from service.report import build_report

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(include_in_schema=False)


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


@router.get("/", response_class=HTMLResponse)
def read_grid(
    request: Request,
    session: SessionDep,
    cursor: Annotated[int | None, Query(ge=1)] = None,
    source: Annotated[str | None, Query(pattern="^(wheel|commit)$")] = None,
    branch: Annotated[str | None, Query(max_length=300)] = None,
    verdict: Annotated[str | None, Query(max_length=16)] = None,
) -> HTMLResponse:
    """The grid of builds by stage."""
    page = list_builds(
        session, cursor=cursor, limit=50, source=source, branch=branch, verdict=verdict
    )
    rows = [build_report(session, get_build(session, item.id)) for item in page.items]
    return templates.TemplateResponse(
        request,
        "grid.html",
        {"page": page, "rows": rows, "stages": [s.value for s in STAGE_ORDER]},
    )


@router.get("/builds/{build_id}", response_class=HTMLResponse)
def read_build_page(request: Request, session: SessionDep, build_id: int) -> HTMLResponse:
    """One build: provenance, capabilities, findings, jobs and stages."""
    report = build_report(session, get_build(session, build_id))
    return templates.TemplateResponse(request, "build.html", {"b": report})
