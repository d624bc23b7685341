"""The one Jinja environment of the dashboard (autoescape on) and its small formatting filters."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from service.errors import NotFound

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")


def timed(response: HTMLResponse, started: float) -> HTMLResponse:
    """Queries and rendering time in a ``Server-Timing`` header (the benchmark reads it)."""
    response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
    return response


def not_found(request: Request, message: str) -> HTMLResponse:
    """A 404 page for a browser; the one error shape for any other client (scripts, curl)."""
    if "text/html" not in request.headers.get("accept", ""):
        raise NotFound(message)
    return templates.TemplateResponse(
        request, "not_found.html", {"message": message}, status_code=404
    )


def when(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def ago(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "never"
    seconds = int((now - value).total_seconds())
    if seconds < 0:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def num(value: float | int | None) -> str:
    """Numbers for tables: ints as they are, floats to 3 significant digits, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if value == 0:
        return "0"
    return f"{value:.3g}"


def commit_url(repo: str | None, sha: str | None) -> str | None:
    """A link to the commit on GitHub, only for a GitHub repository URL."""
    if not repo or not sha or not repo.startswith("https://github.com/"):
        return None
    return f"{repo.removesuffix('.git')}/commit/{sha}"


def query(params: dict[str, object], **changes: object) -> str:
    """A query string from the current filters with some changed (None drops a key)."""
    merged = {**params, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


# Where the grid's narrow columns may break its longest words (a <wbr>: the text stays the
# word): at 1280 px a stage column is narrower than "inconclusive" in bold.
_SOFT = {
    "inconclusive": "incon<wbr>clusive",
    "incomplete": "incom<wbr>plete",
    "applicable": "appli<wbr>cable",
    "determinism": "deter<wbr>min<wbr>ism",
    "numerics": "numer<wbr>ics",
    # the states of the grid's narrowest (subject) columns: a break between syllables rather
    # than before the last letter
    "skipped": "skip<wbr>ped",
    "pending": "pend<wbr>ing",
    "running": "run<wbr>ning",
    "waiting": "wait<wbr>ing",
    "cancelled": "cancel<wbr>led",
    # and the longest words of the subjects' names in their headers
    "compressor": "com<wbr>pres<wbr>sor",
    "attention": "atten<wbr>tion",
    "grouped": "group<wbr>ed",
    "indexer": "index<wbr>er",
    "provider": "pro<wbr>vid<wbr>er",
}
_LONG_WORDS = re.compile("|".join(_SOFT))


def soft(text: object) -> Markup:
    """Text escaped, its long words given a break opportunity (``_SOFT``)."""
    return Markup(_LONG_WORDS.sub(lambda m: _SOFT[m.group(0)], str(escape(text))))


def cell_html(cell: Any) -> Markup:
    """One state cell, every part escaped (the grid's hot path, ~600 a page, is faster here
    than as a Jinja macro)."""
    state = escape(cell.state)
    text = soft(cell.text)
    return Markup(
        f'<span class="st st-{state}" data-state="{state}" title="{escape(cell.reason)}">'
        f"{text}</span>"
    )


def cells_html(cells: list[Any]) -> Markup:
    return Markup("").join(cell_html(c) for c in cells)


_BREAKS = re.compile(r"([._+/-])")


def breakable(text: object) -> Markup:
    """Text escaped, with a line-break opportunity after each ``. _ + / -``: a version, a file
    name or a branch wraps at its separators in a narrow column, never mid-word."""
    return Markup(_BREAKS.sub(r"\1<wbr>", str(escape(text))))


def _shared_start(texts: list[str]) -> str:
    first, last = min(texts), max(texts)
    n = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), len(first))
    return first[:n]


def elide_common(names: list[str]) -> dict[str, str]:
    """Each name with the prefix and suffix that every name of its distribution (the part
    before the first ``-``) shares cut to an ellipsis, at a ``-`` so a wheel's version and tags
    stay whole: what tells the names apart stays visible. A name alone in its distribution is
    left whole."""
    groups: dict[str, set[str]] = {}
    for name in names:
        groups.setdefault(name.split("-", 1)[0], set()).add(name)
    out = {}
    for group in groups.values():
        out.update(_elided(sorted(group)))
    return out


def _elided(distinct: list[str]) -> dict[str, str]:
    if len(distinct) < 2:
        return {n: n for n in distinct}
    head = _shared_start(distinct)
    head = head[: head.rfind("-") + 1]
    tail = _shared_start([n[len(head) :][::-1] for n in distinct])[::-1]
    tail = tail[tail.find("-") :] if "-" in tail else ""
    out = {}
    for name in distinct:
        middle = name[len(head) : len(name) - len(tail)]
        out[name] = f"{'…' if head else ''}{middle}{'…' if tail else ''}" if middle else name
    return out


templates.env.filters.update(
    when=when, num=num, cell=cell_html, cells=cells_html, breakable=breakable, soft=soft
)
templates.env.globals.update(ago=ago, commit_url=commit_url, query=query)
