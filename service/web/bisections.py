"""``/bisections/{id}``: the question, each step (commit, verdict of the deciding check, build) and
the answer, from the same data as ``GET /api/bisections/{id}``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api.bisections import bisection_public
from service.deps import IdPath, SessionDep
from service.models import Bisection
from service.web.templating import templates

router = APIRouter(include_in_schema=False)


@router.get("/bisections/{bisection_id}", response_class=HTMLResponse)
def read_bisection_page(
    request: Request, session: SessionDep, bisection_id: IdPath
) -> HTMLResponse:
    """One bisection, with its steps grouped under it."""
    found = session.get(Bisection, bisection_id)
    if found is None:
        return templates.TemplateResponse(
            request, "not_found.html", {"message": f"No bisection {bisection_id}."}, status_code=404
        )
    return templates.TemplateResponse(
        request, "bisection.html", {"x": bisection_public(session, found)}
    )
