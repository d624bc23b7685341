"""``/compare?a=ID&b=ID``: two builds side by side (what they are, capabilities, per-subject
verdicts, findings, bits and cost), each difference marked, and what changed listed first.

A missing id answers the 404 page (the one error shape for a client that does not ask for HTML),
as ``/builds/{id}`` does. Pure functions over the two stored reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from core.wire import BuildReport, JobKind, Stage
from service.deps import MAX_ID, SessionDep, SettingsDep
from service.models import Build
from service.results import stored_reports
from service.web.templating import not_found, templates

router = APIRouter(include_in_schema=False)

IdQuery = Annotated[int | None, Query(ge=1, le=MAX_ID)]


@dataclass(frozen=True)
class Row:
    what: str
    a: str
    b: str

    @property
    def changed(self) -> bool:
        return self.a != self.b


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)

    @property
    def changes(self) -> list[Row]:
        return [r for r in self.rows if r.changed]


def _ident(r: BuildReport) -> str:
    if r.commit:
        return f"commit {r.commit[:12]}"
    return f"wheel {r.sha256[:12]}" if r.sha256 else "—"


def _build(a: BuildReport, b: BuildReport) -> Section:
    def refusal(r: BuildReport) -> str:
        bad = sum(x.status.value != "pass" for x in r.refusal)
        return f"{len(r.refusal)} rows, {bad} not passing" if r.refusal else "—"

    fields = [
        ("version", lambda r: r.version or "unknown"),
        ("artifact", _ident),
        ("branch", lambda r: r.branch or "—"),
        ("status", lambda r: r.status.value),
        ("verdict", lambda r: f"{r.verdict.value}: {r.verdict_reason}".rstrip(": ")),
        ("refusal matrix", refusal),
    ]
    return Section("Build", [Row(name, get(a), get(b)) for name, get in fields])


def _capability(r: BuildReport, subject: str) -> str:
    c = r.capabilities.get(subject)
    if c is None:
        return "not probed"
    if not c.importable:
        return f"not importable: {c.error or 'unknown error'}"[:200]
    if not c.present:
        return f"no '{c.knob}'"
    return f"'{c.knob}' present, default {c.default} (read by {c.method or '?'})"


def _subject_verdict(r: BuildReport, subject: str) -> str:
    seen = []
    for job in r.jobs:
        if job.kind != JobKind.gpu:
            continue
        for stage in job.stages:
            if stage.name != Stage.determinism:
                continue
            seen += [
                f"{job.family}: {c.status.value}"
                for c in stage.checks
                if c.name == f"{subject}.deterministic"
            ]
    if seen:
        return ", ".join(sorted(seen))
    why = next((n.reason for n in r.not_run if n.subject == subject), None)
    return f"did not run: {why}" if why else "—"


def _finding_key(kind: str, subject: str | None) -> str:
    return f"{kind} ({subject})" if subject else kind


def _findings(a: BuildReport, b: BuildReport) -> Section:
    def table(r: BuildReport) -> dict[str, str]:
        return {_finding_key(f.kind, f.subject): f.severity.value for f in r.findings}

    ta, tb = table(a), table(b)
    keys = sorted(set(ta) | set(tb))
    return Section("Findings", [Row(k, ta.get(k, "—"), tb.get(k, "—")) for k in keys])


def _history(a: BuildReport, b: BuildReport) -> Section:
    def table(r: BuildReport) -> dict[str, str]:
        out = {}
        for h in r.history:
            cost = f"{h.cost_ratio:.2f}x" if h.cost_ratio is not None else "no cost"
            where = h.cell or h.family or "?"
            out[f"{h.subject} on {where}"] = f"bits {h.bits}, {cost} at {h.config}"
        return out

    ta, tb = table(a), table(b)
    keys = sorted(set(ta) | set(tb))
    return Section("Bits and cost", [Row(k, ta.get(k, "—"), tb.get(k, "—")) for k in keys])


def sections(a: BuildReport, b: BuildReport) -> list[Section]:
    subjects = sorted(set(a.capabilities) | set(b.capabilities))
    return [
        _build(a, b),
        Section("Capabilities", [Row(s, _capability(a, s), _capability(b, s)) for s in subjects]),
        Section(
            "Per-subject verdicts",
            [Row(s, _subject_verdict(a, s), _subject_verdict(b, s)) for s in subjects],
        ),
        _findings(a, b),
        _history(a, b),
    ]


@router.get("/compare", response_class=HTMLResponse)
def read_compare(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    a: IdQuery = None,
    b: IdQuery = None,
) -> HTMLResponse:
    """Two builds side by side; without both ids, a form that asks for them."""
    if a is None or b is None:
        return templates.TemplateResponse(request, "compare.html", {"a": a, "b": b, "ra": None})
    found = {i: session.get(Build, i) for i in (a, b)}
    missing = [i for i, build in found.items() if build is None]
    if missing:
        return not_found(request, f"No build {missing[0]}.")
    ra, rb = (stored_reports.current(session, found[i], settings) for i in (a, b))  # type: ignore[arg-type]
    parts = sections(ra, rb)
    context = {"a": a, "b": b, "ra": ra, "rb": rb, "sections": parts}
    return templates.TemplateResponse(request, "compare.html", context)
