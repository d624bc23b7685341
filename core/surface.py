"""The determinism surface of a build: which subject covers each discovered knob, and what
changed along a line.

Standard library only: the probe imports it inside the candidate's environment (to say which
knobs no subject covers), and the service and ``fe-ci validate --previous`` use it to compare a
build's surface with the previous build of its line. A knob is a mapping with ``entry_point``,
``knob``, ``default`` (source text or a repr, None when required), ``kind`` (``parameter``,
``torch_flag``, ``op_schema``) and ``method`` (``ast``, ``docstring``, ``schema``), as
``runner/inside/discovery.py`` writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.frontend_refusals import FrontendRefusal, rows_of
from core.kinds import FindingKind
from core.knob_effects import no_effect
from core.subjects import SUBJECTS, Subject

REMOVED = FindingKind.knob_removed
DEFAULT_CHANGED = FindingKind.knob_default_changed
ADDED = FindingKind.knob_added
NOT_COVERED = FindingKind.knob_not_covered
UNPARSABLE = FindingKind.source_unparsable
TRUNCATED = FindingKind.surface_truncated
LINE_KINDS = (REMOVED, DEFAULT_CHANGED, ADDED)

# How a knob is covered, in the order the summary line counts them.
EXERCISED = "exercised"
COMPILE_ONLY = "compile_only"
REFUSAL_ONLY = "refusal_only"
UNCOVERED = "not_covered"
STATUSES = (EXERCISED, COMPILE_ONLY, REFUSAL_ONLY, UNCOVERED)
_WORDS = {
    EXERCISED: "exercised",
    COMPILE_ONLY: "compile-only",
    REFUSAL_ONLY: "refusal-only",
    UNCOVERED: "not covered",
}
FLAG = "torch flag"


def key(knob: Mapping[str, Any]) -> tuple[str, str]:
    return str(knob.get("entry_point")), str(knob.get("knob"))


def label(knob: Mapping[str, Any]) -> str:
    """``entry(knob=default)``, or ``entry (follows the torch flag)``."""
    if knob.get("kind") == "torch_flag":
        return f"{knob.get('entry_point')} (follows torch.use_deterministic_algorithms)"
    default = knob.get("default")
    given = "" if default is None else f"={default}"
    return f"{knob.get('entry_point')}({knob.get('knob')}{given})"


def subjects_of(
    knob: Mapping[str, Any], subjects: Iterable[Subject] | None = None
) -> list[Subject]:
    """The subjects that exercise this knob, from the subjects' declarations (a new subject's
    file is enough): same callable (by its last name, since a package exports it under several
    paths) and, for a parameter, the same parameter. A wrapper that reads the torch flag is
    covered by the subject of its knob (its default follows the flag). Several where the knob
    has code paths of its own, one subject each (``sdpa_torch_bwd``, ``sdpa_torch_thd_bwd``)."""
    entry = str(knob.get("entry_point", ""))
    last = entry.rsplit(".", 1)[-1]
    found = []
    for s in subjects if subjects is not None else SUBJECTS.values():
        names = {e.rsplit(".", 1)[-1] for e in s.entry_points}
        if last in names and (knob.get("kind") == "torch_flag" or knob.get("knob") == s.knob):
            found.append(s)
    return found


def subject_of(
    knob: Mapping[str, Any], subjects: Iterable[Subject] | None = None
) -> Subject | None:
    """The first of ``subjects_of``: the knob's subject, or None where no subject exercises it."""
    found = subjects_of(knob, subjects)
    return found[0] if found else None


def refusals_of(knob: Mapping[str, Any]) -> list[FrontendRefusal]:
    """The frontend refusal rows that check this knob (``core/frontend_refusals.py``)."""
    return rows_of(str(knob.get("entry_point", "")), str(knob.get("knob", "")))


MAX_NAMED = 100  # knob_not_covered findings named one by one; the rest are counted in one


def uncovered(knobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A ``knob_not_covered`` warning for each knob no subject exercises (the first
    ``MAX_NAMED``; one more finding counts the rest, so a stage's findings stay bounded)."""
    missing = [knob for knob in knobs if subject_of(knob) is None and not refusals_of(knob)]
    out = [
        finding(
            NOT_COVERED,
            "warning",
            f"{label(knob)}: no subject exercises it, so nothing checks that it makes the "
            "output reproducible",
        )
        for knob in missing[:MAX_NAMED]
    ]
    if len(missing) > MAX_NAMED:
        rest = len(missing) - MAX_NAMED
        out.append(
            finding(
                NOT_COVERED, "warning", f"{rest} more knobs no subject exercises (see coverage)"
            )
        )
    return out


def changes(
    previous: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """What the surface lost (error), changed (warning) and gained (info) since ``previous``."""
    before = {key(k): k for k in previous}
    now = {key(k): k for k in current}
    out = []
    for k, knob in before.items():
        if k not in now:
            out.append(
                finding(
                    REMOVED,
                    "error",
                    f"{label(knob)} is gone: the previous build had it, and a caller that "
                    "passes it now gets a TypeError or silently loses determinism",
                )
            )
        elif knob.get("default") != now[k].get("default"):
            out.append(
                finding(
                    DEFAULT_CHANGED,
                    "warning",
                    f"{k[0]}'s '{k[1]}' default changed from {knob.get('default')} to "
                    f"{now[k].get('default')}",
                )
            )
    for k, knob in now.items():
        if k not in before:
            out.append(finding(ADDED, "info", f"{label(knob)} is new in this build"))
    return out


def coverage(
    knobs: Iterable[Mapping[str, Any]],
    exercised: Mapping[str, set[str]],
    compiled: set[str],
    refused: Mapping[str, set[str]] | None = None,
) -> list[dict[str, Any]]:
    """One row per knob: how this build's jobs covered it.

    ``exercised``: subject -> the families whose determinism stage ran it; ``compiled``: the
    subjects compiled for their GPU without it; ``refused``: frontend refusal row -> the families
    whose refusal stage ran it. A subject or row nothing ran says where it would run.
    """
    refused = refused or {}
    rows = []
    for knob in knobs:
        found = subjects_of(knob)
        s, names = (found[0] if found else None), [x.name for x in found]
        row = {
            "entry_point": knob.get("entry_point"),
            "knob": knob.get("knob"),
            "default": knob.get("default"),
            "kind": knob.get("kind"),
            "method": knob.get("method"),
            "subject": s.name if s else None,
            "subjects": names,
            "families": list(s.families) if s else [],
        }
        # exercised where every path's subject ran: one of them alone leaves the others' code
        runs = [set(exercised.get(x.name, ())) for x in found]
        ran = sorted(set.intersection(*runs)) if runs else []
        partly = [x.name for x, r in zip(found, runs, strict=True) if r] if not ran else []
        if s is None:
            row.update(_refusal_only(knob, refused))
        elif ran:
            row.update(status=EXERCISED, why=f"{', '.join(names)} on {', '.join(ran)}")
        elif partly:
            left = [x.name for x in found if x.name not in partly]
            row.update(status=UNCOVERED, why=f"{', '.join(partly)} ran; {', '.join(left)} (the "
                       "same knob's other path) did not")  # fmt: skip
        elif s.name in compiled:
            row.update(status=COMPILE_ONLY, why=f"{s.name} compiled for sm_100a, not run")
        elif refused_here := _refusal_only(knob, refused) if refusals_of(knob) else None:
            # a subject of another family, and a family where the frontend must refuse it
            if refused_here["status"] == REFUSAL_ONLY:
                row.update(status=REFUSAL_ONLY, why=refused_here["why"] + f"; {s.name} would "
                           f"run it on {', '.join(s.families)}")  # fmt: skip
            else:
                row.update(status=UNCOVERED, why=f"would run as {s.name} on "
                           f"{', '.join(s.families)}; {refused_here['why']}")  # fmt: skip
        else:
            row.update(
                status=UNCOVERED,
                why=f"would run as {s.name} on {', '.join(s.families)}; no job of those "
                "families ran it",
            )
        if measured := no_effect(knob.get("entry_point"), knob.get("knob")):
            row["why"] = f"{row['why']}; measured without effect on {measured}"
        rows.append(row)
    return rows


def _refusal_only(knob: Mapping[str, Any], refused: Mapping[str, set[str]]) -> dict[str, Any]:
    """A knob no subject exercises: refusal-only where a job ran its frontend refusal rows."""
    rows = refusals_of(knob)
    if not rows:
        return {"status": UNCOVERED, "why": "no subject exercises it"}
    names = ", ".join(r.name for r in rows)
    ran = sorted({f for r in rows for f in refused.get(r.name, ())})
    families = sorted({f for r in rows for f in r.families})
    if ran:
        return {
            "status": REFUSAL_ONLY,
            "families": families,
            "why": f"the frontend's refusal ({names}) checked on {', '.join(ran)}",
        }
    return {
        "status": UNCOVERED,
        "families": families,
        "why": f"would be refusal-only ({names}) on {', '.join(families)}; no job of those "
        "families ran it",
    }


def summary(rows: Iterable[Mapping[str, Any]]) -> str:
    """``17 knobs: 6 exercised, 4 compile-only, 2 refusal-only, 5 not covered``."""
    rows = list(rows)
    counts = {s: sum(1 for r in rows if r.get("status") == s) for s in STATUSES}
    parts = ", ".join(f"{counts[s]} {_WORDS[s]}" for s in STATUSES)
    return f"{len(rows)} knob{'s' if len(rows) != 1 else ''}: {parts}"


def finding(kind: str, severity: str, message: str) -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "subject": None, "message": message[:8000]}
