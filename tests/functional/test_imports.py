"""Who may import whom, read from the source with ``ast``: a test module never imports another
test module or conftest (shared helpers are in tests/helpers.py and testkit/), the benchmarks and
the tests never import each other (what both need is in testkit/), and the product never imports
testkit. The runner's modules and the ``fe-ci`` commands import no loop among themselves, and each
imports alone, without the service. What each room of runner/ and service/ may import is in
test_rooms.py. The service reaches its database sessions through
``service/deps.py`` alone.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.service import ROOT
from tests.import_reading import imported

# The service's stack: core (the domain both sides share) never pulls it in.
WEB_AND_STORE = ("fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "jinja2")


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(n for n in imported(path) if n.split(".")[0] in forbidden)
        if bad:
            out[str(path.relative_to(ROOT))] = bad
    return out


def test_no_test_module_imports_another() -> None:
    """Nor conftest: pytest loads it itself, and what tests share is in tests/helpers.py."""
    found = {
        str(path.relative_to(ROOT)): sorted(
            n
            for n in imported(path)
            if any(p.startswith("test_") or p == "conftest" for p in n.split("."))
        )
        for path in sorted((ROOT / "tests").rglob("*.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("bench", ("tests",)),
        ("tests", ("bench",)),
        ("testkit", ("tests", "bench")),
        ("service", ("tests", "bench", "testkit", "runner", "cli")),
        ("runner", ("tests", "bench", "testkit", "cli", "service")),
        ("cli", ("tests", "bench", "testkit")),
        ("core", ("tests", "bench", "testkit", "runner", "service", "cli", *WEB_AND_STORE)),
    ],
)
def test_imports_stay_on_their_side(folder: str, forbidden: tuple[str, ...]) -> None:
    assert offenders(folder, forbidden) == {}


def test_the_check_sees_an_import_written_inside_a_function(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from tests.test_protocol import stage\n    import bench.load\n")
    assert {"tests.test_protocol", "bench.load"} <= imported(src)


@pytest.mark.parametrize(
    ("source", "seen"),
    [
        ("from . import test_protocol\n", "tests.test_protocol"),
        ("from .test_protocol import stage\n", "tests.test_protocol"),
        ("from ..bench import load\n", "bench.load"),
    ],
)
def test_the_check_sees_a_relative_import(tmp_path: Path, source: str, seen: str) -> None:
    """tests/ is a package, so a test module could reach another one relatively."""
    src = tmp_path / "m.py"
    src.write_text(source)
    assert seen in imported(src, package=("tests",))


# ------------------------------------------------------------------ the runner's own modules

# What a runner host must not need: the runner never imports the service's stack.
SERVICE_STACK = ("service", "fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn")
# runner/ and its rooms, cli/, and core/ with core's packages (core/wire/); runner/inside/ runs in a
# candidate's env.
RUNNER_MODULES = sorted(
    ".".join(p.parts[:-1] if p.stem == "__init__" else (*p.parts[:-1], p.stem))
    for pattern in ("runner/*.py", "runner/*/*.py", "cli/*.py", "core/*.py", "core/*/*.py")
    for p in (q.relative_to(ROOT).with_suffix("") for q in ROOT.glob(pattern))
    if p.parts[:2] != ("runner", "inside")
)


def import_graph(root: Path, package: str, *, when_run: bool = True) -> dict[str, set[str]]:
    """{module: the modules of ``package`` it imports when run}, imports inside functions included
    (a loop that only closes when a function runs is still a loop); ``when_run=False``: those under
    ``if TYPE_CHECKING:`` too."""
    paths = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in paths.items():
        found = imported(path, path.parent.relative_to(root).parts, when_run=when_run)
        graph[name] = {n for n in found if n in paths and n != name}
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, round and round (strongly connected)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["runner", "cli", "core", "service"])
def test_no_import_loop_between_modules(package: str) -> None:
    assert loops(import_graph(ROOT, package)) == []


@pytest.mark.parametrize("package", ["runner", "cli", "core", "service"])
def test_no_loop_even_through_a_type_only_import(package: str) -> None:
    """A loop closed under ``if TYPE_CHECKING:`` runs, but it still ties two modules into one: the
    sandbox's job box and the environments, a stage's process and the zygotes, each were such a
    pair (what both needed now has a module of its own: ``envs/host.py``, ``stage_source.py``),
    and so were core's bounds and the stage result they check (``wire.results.undeclared_configs``
    now sits with the result)."""
    assert loops(import_graph(ROOT, package, when_run=False)) == []


def test_what_a_candidate_gets_of_core_is_standard_library_only() -> None:
    """A candidate stage runs in the candidate's environment, which has no pydantic: the part of
    core copied into its private source imports the standard library and itself, nothing else."""
    from runner.isolation.stage_source import CORE_FOR_CANDIDATE

    copied = {f"core.{Path(n).stem}" for n in CORE_FOR_CANDIDATE if n.endswith(".py")}
    found = {
        name: sorted(
            n
            for n in imported(ROOT / "core" / f"{name.split('.')[1]}.py", ("core",))
            if n.split(".")[0] not in sys.stdlib_module_names
            and n.split(".")[0] != "__future__"
            and not any(n == c or n.startswith(f"{c}.") for c in copied)
        )
        for name in copied
        if name != "core.__init__"
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_the_loop_check_sees_a_loop_closed_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\n"
    )
    (pkg / "d.py").write_text("import pkg.c\n")
    assert loops(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b"]]


# The third-party packages runner/ and core/ import, none of them the service's stack: the helper
# interpreter below imports them once, then forks a child per module, which imports that module
# before any other of the project's (a fresh interpreter per module cost 0.4 s of CPU each).
THIRD_PARTY = ("pydantic", "pydantic_settings", "httpx", "typer", "rich.console", "tenacity",
               "packaging.version")  # fmt: skip
FORKED_IMPORTS = """
import importlib, json, os, sys, traceback
for name in sys.argv[2:]:
    importlib.import_module(name)
stack = json.loads(sys.argv[1])
assert not [n for n in stack if n in sys.modules], "the helper itself loaded the service's stack"
modules = [line.strip() for line in sys.stdin if line.strip()]
for module in modules:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(module)
            out = {"module": module, "stack": sorted(n for n in stack if n in sys.modules)}
        except BaseException:
            out = {"module": module, "error": traceback.format_exc()}
        sys.stdout.write(json.dumps(out) + "\\n")
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def imported_alone() -> dict[str, dict[str, object]]:
    """Each of RUNNER_MODULES imported first of the project's modules in an interpreter of its
    own (a fork of one that holds only the standard library and THIRD_PARTY): module -> what the
    child saw (``stack``: the service's packages it loaded; ``error``: the traceback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    proc = subprocess.run(
        [sys.executable, "-c", FORKED_IMPORTS, json.dumps(SERVICE_STACK), *THIRD_PARTY],
        input="\n".join(RUNNER_MODULES),
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {row["module"]: row for row in rows}


@pytest.mark.parametrize("module", RUNNER_MODULES)
def test_each_runner_module_imports_alone(
    module: str, imported_alone: dict[str, dict[str, object]]
) -> None:
    """First of the project's modules in its interpreter (an import loop fails here for the
    module that starts it), and without the service's stack, which a runner host does not have."""
    assert module in imported_alone, f"{module}: its child reported nothing"
    got = imported_alone[module]
    assert "error" not in got, got.get("error")
    assert got["stack"] == [], module


# ------------------------------------------------------------------ the app's state


def app_state_uses(path: Path) -> list[int]:
    """The lines of ``path`` that touch ``app.state`` (``request.app.state``, ``self.app.state``),
    reading or setting."""
    tree = ast.parse(path.read_text(), str(path))

    def is_app(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "app") or (
            isinstance(node, ast.Attribute) and node.attr == "app"
        )

    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "state" and is_app(node.value)
        }
    )


def test_the_apps_state_is_one_typed_object_read_in_one_module(tmp_path: Path) -> None:
    """``create_app`` sets one ``ServiceState`` and ``service/state.py`` alone reads it off
    ``app.state`` (routes through ``deps.StateDep``): a key set in one module and read with
    ``getattr`` in another is a fact mypy cannot see."""
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "service").rglob("*.py"))
        if path != ROOT / "service" / "state.py" and (lines := app_state_uses(path))
    }
    assert found == {}
    seen = tmp_path / "m.py"
    seen.write_text("app.state.x = 1\nrequest.app.state.y\njob.state\nself.app.state.z\n")
    assert app_state_uses(seen) == [1, 2, 4]  # the check sees each, and leaves a job's be


def info_uses(path: Path) -> list[int]:
    """The lines of ``path`` that touch a session's or a session factory's ``info``
    (``session.info``, ``sessions.configure(info=...)``)."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "info"
                and "session" in ast.unparse(node.value)
            )
            or (isinstance(node, ast.keyword) and node.arg == "info")
        }
    )


# What a transaction asked for once it commits (the statuses outbox to drain, a drain or a pump to
# start): the one use of a session's ``info``, each read back by its own ``after_commit``.
AFTER_COMMIT_MARKS = {
    "service/jobs/bisection_runs.py",
    "service/outbound/status_outbox.py",
    "service/outbound/notifications.py",
}


def test_nothing_reaches_the_report_through_a_sessions_info() -> None:
    """The settings a report is judged by, the GitHub reporter and the build-finished listeners
    are arguments (``events.Reactions``, made in ``create_app``), never hung on the sessions."""
    found = {
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "service").rglob("*.py"))
        if info_uses(path)
    }
    assert found == AFTER_COMMIT_MARKS


def alive_queries(path: Path) -> bool:
    """Whether ``path`` compares ``Runner.last_seen_at`` in a query (the "runner alive" rule)."""
    tree = ast.parse(path.read_text(), str(path))
    return any(
        isinstance(node, ast.Compare)
        and any(
            ast.unparse(side) == "Runner.last_seen_at" for side in (node.left, *node.comparators)
        )
        for node in ast.walk(tree)
    )


def test_the_runners_alive_are_queried_in_one_module() -> None:
    """``service/jobs/capable.py::alive``: the queue's ``auto`` families, the waiting cells and
    the report's waiting reasons all read it (it was queried in four places)."""
    found = {
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "service").rglob("*.py"))
        if alive_queries(path)
    }
    assert found == {"service/jobs/capable.py"}


# ------------------------------------------------------------------ what a service start loads

START = """
import os, sys, json
from service.app import create_app
from service.config import Settings
create_app(Settings())  # an empty SQLite file: its tables made from the models
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"alembic", "httpx"})))
"""


def test_a_service_start_on_a_new_database_loads_neither_alembic_nor_httpx(tmp_path: Path) -> None:
    """Alembic only for a database behind head, httpx only to post a status or notification:
    together they were about a fifth of a start's CPU (bench/service_starts.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        PYTHONPATH=str(ROOT),
        FE_CI_DATA_DIR=str(tmp_path / "data"),
        FE_CI_GPU_ARCHS="",
        FE_CI_RUNNER_LABELS="",
    )
    proc = subprocess.run(
        [sys.executable, "-c", START], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    assert (tmp_path / "data" / "fe-ci.sqlite3").stat().st_size > 0
