"""Finding kinds are one enumeration (``core/kinds.py``), and what adding a kind, a stage field
or a job state touches is counted, so that a fact named in one more place fails here.

The counts grep the source for the places a thing must be named: a finding kind written as a
free string; a stage result's fields listed one by one (every file that names all of
``duration_s``, ``log_tail`` and ``timings``); the job states listed one by one (every file that
names all of them). A count may fall; one that rises means a fact gained a second home."""

from __future__ import annotations

import re
from pathlib import Path

from core.kinds import FindingKind
from core.verdict import finding_stage
from core.wire import JobState

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("core", "service", "runner", "cli")
# What adding each touches today, besides docs/determinism.md's table for a kind and a migration
# for a stage field (before: 11 files named a kind as a free string, 5 listed a stage result's
# fields, 5 the job states).
KIND_FILES = {"core/kinds.py"}
STAGE_FIELD_FILES = 4
JOB_STATE_FILES = 5


def _python() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text()
        for root in SOURCES
        for p in sorted((ROOT / root).rglob("*.py"))
        if "migrations" not in p.parts
    }


def files_naming_a_kind() -> set[str]:
    quoted = re.compile("|".join(rf"[\"']{re.escape(k.value)}[\"']" for k in FindingKind))
    return {path for path, text in _python().items() if quoted.search(text)}


def files_naming_all(words: list[str]) -> set[str]:
    patterns = [re.compile(rf"\b{re.escape(w)}\b") for w in words]
    return {p for p, text in _python().items() if all(r.search(text) for r in patterns)}


def _table() -> dict[str, str]:
    """``docs/determinism.md``'s table of finding kinds: kind -> stage."""
    text = (ROOT / "docs/determinism.md").read_text()
    section = text.split("## Finding kinds", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| ([a-z]+) \|", section, re.MULTILINE)
    return dict(rows)


def test_the_docs_table_lists_every_finding_kind_and_its_stage() -> None:
    table = _table()
    assert sorted(table) == sorted(k.value for k in FindingKind)
    assert table == {k.value: finding_stage(k).value for k in FindingKind}


def test_a_finding_kind_is_named_as_a_string_in_one_file() -> None:
    assert files_naming_a_kind() == KIND_FILES


def test_a_stage_field_and_a_job_state_are_listed_in_no_more_files_than_counted() -> None:
    fields = files_naming_all(["duration_s", "log_tail", "timings"])
    states = files_naming_all([s.value for s in JobState])
    assert len(fields) <= STAGE_FIELD_FILES, sorted(fields)
    assert len(states) <= JOB_STATE_FILES, sorted(states)
