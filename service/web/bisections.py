"""``/bisections/{id}``: a bisection worded as ``git bisect`` is: the question, the good and bad
ends, each tested commit marked good, bad or skip, in commit order (oldest first), and the
answer; from the same data as ``GET /api/bisections/{id}``."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from core.transitions import ABSENT, PRESENT, Question
from service.api.bisections import BisectionPublic, bisection_public
from service.deps import IdPath, SessionDep
from service.models import Bisection
from service.web.templating import templates

router = APIRouter(include_in_schema=False)


def shown(q: Question, value: str) -> str:
    """What a commit showed for the question, in words (the API keeps the raw value)."""
    subject = f" on {q.subject}" if q.subject else ""
    if value == PRESENT:
        return f"{q.rule}{subject} is reported"
    if value == ABSENT:
        return f"no {q.rule}{subject}"
    return f"{q.check} is {value}"


def title(x: BisectionPublic) -> str:
    q = x.question
    where = f" on {q.family}" if q.family else ""
    return f"git bisect {x.branch}: the first commit where {shown(q, q.bad)}{where}"


@dataclass(frozen=True)
class Line:
    commit: str
    mark: str  # good | bad | skip | testing
    showed: str
    build_id: int | None
    role: str  # the good end, a step, the bad end


def lines(x: BisectionPublic, commits: list[str]) -> list[Line]:
    """The good end, every tested commit in commit order, the bad end."""
    q = x.question
    order = {c: i for i, c in enumerate(commits)}
    steps = sorted(x.steps, key=lambda s: order.get(s.commit, len(order)))
    out = [Line(x.good.commit, "good", shown(q, q.good), x.good.build_id, "good")]
    for s in steps:
        words = s.verdict if s.verdict in ("running", "") else shown(q, s.verdict)
        if s.mark == "skip":
            words = s.verdict  # why it answered nothing
        out.append(Line(s.commit, s.mark or "testing", words, s.build_id, "step"))
    out.append(Line(x.bad.commit, "bad", shown(q, q.bad), x.bad.build_id, "bad"))
    return out


@router.get("/bisections/{bisection_id}", response_class=HTMLResponse)
def read_bisection_page(
    request: Request, session: SessionDep, bisection_id: IdPath
) -> HTMLResponse:
    """One bisection, its tested commits in commit order."""
    found = session.get(Bisection, bisection_id)
    if found is None:
        return templates.TemplateResponse(
            request, "not_found.html", {"message": f"No bisection {bisection_id}."}, status_code=404
        )
    x = bisection_public(session, found)
    context = {"x": x, "title": title(x), "lines": lines(x, list(found.commits))}
    return templates.TemplateResponse(request, "bisection.html", context)
