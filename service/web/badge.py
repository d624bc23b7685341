"""``/badge/{branch}.svg``: a shields-style badge, "fe-ci" and the verdict of the branch's newest
finished build, in its colour. A branch with no finished build (or no such branch) gets a grey
"unknown" badge with 200, so a README's image never breaks. Branch names may hold slashes
(``/badge/release/1.x.svg``); ``refs/heads/`` in front is accepted too.

Uploaded wheels are a line of their own: ``/badge/uploads.svg`` is the newest finished upload's
verdict (a branch named ``uploads`` is still ``/badge/refs/heads/uploads.svg``)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.wire import Verdict
from service.deps import SessionDep
from service.models import Build

router = APIRouter(include_in_schema=False)

LABEL = "fe-ci"
GREY = "#9f9f9f"
COLOURS = {
    Verdict.pass_: "#4c1",
    Verdict.fail: "#e05d44",
    Verdict.error: "#fe7d37",
    Verdict.inconclusive: "#dfb317",
    Verdict.incomplete: "#a4a61d",
}
# Verdana 11 px, the shields font, by character class (close enough to centre the text).
_NARROW, _WIDE = set("fijlrt.,:;|!'()[] "), set("mwMW@%")


def text_width(text: str) -> int:
    return int(sum(3.6 if c in _NARROW else 10.0 if c in _WIDE else 7.0 for c in text))


def render(message: str, colour: str) -> str:
    lw, mw = text_width(LABEL) + 10, text_width(message) + 10
    width = lw + mw
    label, msg = escape(LABEL), escape(message)
    texts = "".join(
        f'<text x="{x}" y="15" fill="#010101" fill-opacity=".3">{t}</text>'
        f'<text x="{x}" y="14">{t}</text>'
        for x, t in ((lw / 2, label), (lw + mw / 2, msg))
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
        f'aria-label="{label}: {msg}"><title>{label}: {msg}</title>'
        '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" '
        'stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>'
        f'<clipPath id="r"><rect width="{width}" height="20" rx="3" fill="#fff"/></clipPath>'
        f'<g clip-path="url(#r)"><rect width="{lw}" height="20" fill="#555"/>'
        f'<rect x="{lw}" width="{mw}" height="20" fill="{colour}"/>'
        f'<rect width="{width}" height="20" fill="url(#s)"/></g>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" '
        f'font-size="11">{texts}</g></svg>'
    )


def latest_verdict(session: Session, branch: str) -> Verdict | None:
    """The verdict of the branch's newest finished build (bisection steps and cancelled builds
    say nothing about the branch)."""
    name = branch.removeprefix("refs/heads/")
    verdict = session.scalars(
        select(Build.verdict)
        .where(Build.branch.in_([name, f"refs/heads/{name}"]), Build.finished_at.is_not(None))
        .where(Build.bisection_id.is_(None), Build.cancelled_at.is_(None))
        .order_by(Build.id.desc())
        .limit(1)
    ).first()
    return Verdict(verdict) if verdict is not None else None


def latest_upload_verdict(session: Session) -> Verdict | None:
    """The verdict of the newest finished upload (a wheel, not a commit; not cancelled)."""
    verdict = session.scalars(
        select(Build.verdict)
        .where(Build.source == "wheel", Build.finished_at.is_not(None))
        .where(Build.bisection_id.is_(None), Build.cancelled_at.is_(None))
        .order_by(Build.id.desc())
        .limit(1)
    ).first()
    return Verdict(verdict) if verdict is not None else None


def _badge(verdict: Verdict | None) -> Response:
    message = verdict.value if verdict is not None else "unknown"
    body = render(message, COLOURS.get(verdict, GREY) if verdict is not None else GREY)
    headers = {"Cache-Control": "no-cache, max-age=0"}  # image proxies must ask again
    return Response(body, media_type="image/svg+xml", headers=headers)


@router.get("/badge/uploads.svg")
def read_uploads_badge(session: SessionDep) -> Response:
    """The uploads' badge: the newest finished uploaded wheel's verdict."""
    return _badge(latest_upload_verdict(session))


@router.get("/badge/{branch:path}.svg")
def read_badge(session: SessionDep, branch: str) -> Response:
    """The branch's badge; never an error page."""
    return _badge(latest_verdict(session, branch[:300]))
