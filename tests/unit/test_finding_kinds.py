"""Finding kinds are one enumeration (``core/kinds.py``), and what adding a kind, a stage field
or a job state touches is counted from the code, so that a fact named in one more place fails here.

Each count is the set of files one edits besides the code that produces or reads the new thing:
- a finding kind: the enumeration, ``docs/determinism.md``'s table, and every file that names a
  kind as a free string;
- a stage field: ``StageResult``, every file that lists a stage's own fields one by one (names
  all of ``duration_s``, ``log_tail`` and ``timings``), and, where the stages' table keeps a column
  per field, the model and a new migration (a stage's result is stored whole since 0019);
- a job state: every file that names each state (the enumeration, the allowed transitions).

At 4f909ad (before the stage's result was stored whole): a kind 2 files, a stage field 5, a job
state 2. Now: 2, 3, 2. Earlier still (before the enumeration): 11 files named a kind as a free
string."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from core.kinds import FindingKind
from core.verdict import finding_stage

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("core", "service", "runner", "cli")
NEW_MIGRATION = "service/migrations/versions/(a new revision)"
KIND_FILES = {"core/kinds.py", "docs/determinism.md"}
STAGE_FIELD_FILES = {
    "core/wire/results.py",
    "runner/pipeline/pipeline.py",  # fills the timings and the log tail of each stage
    "runner/pipeline/stage_results.py",  # fits a result within the door's bounds
}
JOB_STATE_FILES = {"core/wire/vocabulary.py", "service/jobs/transitions.py"}


def _python(root: Path = ROOT) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for source in SOURCES
        for p in sorted((root / source).rglob("*.py"))
        if "migrations" not in p.parts
    }


def _members(path: Path, name: str) -> list[str]:
    """The members of the enumeration ``name`` in ``path``, read from its source."""
    tree = ast.parse(path.read_text())
    (found,) = (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    return [t.targets[0].id for t in found.body if isinstance(t, ast.Assign)]  # type: ignore[attr-defined]


def kind_touches(root: Path = ROOT) -> set[str]:
    kinds = _members(root / "core/kinds.py", "FindingKind")
    quoted = re.compile("|".join(rf"[\"']{re.escape(k)}[\"']" for k in kinds))
    out = {path for path, text in _python(root).items() if quoted.search(text)}
    out.add("core/kinds.py")
    if "## Finding kinds" in (root / "docs/determinism.md").read_text():
        out.add("docs/determinism.md")
    return out


def files_naming_all(words: list[str], root: Path = ROOT) -> set[str]:
    patterns = [re.compile(rf"\b{re.escape(w)}\b") for w in words]
    return {p for p, text in _python(root).items() if all(r.search(text) for r in patterns)}


def stage_field_touches(root: Path = ROOT) -> set[str]:
    out = files_naming_all(["duration_s", "log_tail", "timings"], root) | {"core/wire/results.py"}
    for path in sorted((root / "service/models").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "StageRow":
                columns = {
                    t.target.id
                    for t in node.body
                    if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)
                }
                if columns & {"version", "log_tail", "timings"}:  # a column per stage field
                    out |= {str(path.relative_to(root)), NEW_MIGRATION}
    return out


def job_state_touches(root: Path = ROOT) -> set[str]:
    states = _members(root / "core/wire/vocabulary.py", "JobState")
    named = [re.compile(rf"JobState\.{s}\b|[\"']{s}[\"']") for s in states]
    return {p for p, text in _python(root).items() if all(r.search(text) for r in named)}


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


def test_a_finding_kind_touches_its_enumeration_and_the_docs_table() -> None:
    assert kind_touches() == KIND_FILES


def test_a_stage_field_touches_no_column_and_no_migration() -> None:
    assert stage_field_touches() == STAGE_FIELD_FILES


def test_a_job_state_touches_its_enumeration_and_the_transitions() -> None:
    assert job_state_touches() == JOB_STATE_FILES


def test_the_counts_see_a_second_home(tmp_path: Path) -> None:
    """Each count grows when a fact gains a home: a kind as a free string, a stage's table with a
    column per field, every job state listed again."""
    for name in ("core/wire", "service/models", "docs", "runner"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "core/kinds.py").write_text((ROOT / "core/kinds.py").read_text())
    (tmp_path / "core/wire/vocabulary.py").write_text(
        (ROOT / "core/wire/vocabulary.py").read_text()
    )
    (tmp_path / "docs/determinism.md").write_text("")
    (tmp_path / "runner/x.py").write_text(
        "KIND = 'consumer_gap'\nSTATES = ('waiting', 'queued', 'leased', 'finished', 'cancelled')\n"
    )
    (tmp_path / "service/models/m.py").write_text(
        "class StageRow:\n    log_tail: str\n    timings: dict\n"
    )
    assert kind_touches(tmp_path) == {"core/kinds.py", "runner/x.py"}
    assert stage_field_touches(tmp_path) == {
        "core/wire/results.py",
        "service/models/m.py",
        NEW_MIGRATION,
    }
    assert job_state_touches(tmp_path) == {"core/wire/vocabulary.py", "runner/x.py"}
