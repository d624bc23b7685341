"""What each room may import: a room is a subpackage of runner/ or service/ (``runner.agent``,
``service.jobs``), one of the modules beside them (``runner.build``), or cli/. The table below is
docs/architecture.md's "may import" column, read the other way round: what a room never imports,
not even inside a function, so that the layers stay layers and the ``fe-ci`` commands load on a
runner host that has no FastAPI.
"""

from __future__ import annotations

import ast
from pathlib import Path

from testkit.service import ROOT
from tests.import_reading import imported

# room -> the rooms it never imports, not even inside a function. A room is a subpackage of
# runner/ or service/ (runner.agent), or one of the top-level modules beside them (runner.build).
ROOMS: dict[str, tuple[str, ...]] = {
    # the agent drives everything below it; nothing below reaches back up to it
    "runner.isolation": ("runner.agent", "runner.pipeline", "runner.cache", "cli"),
    "runner.envs": ("runner.agent", "runner.pipeline", "runner.cache", "cli"),
    "runner.cache": ("runner.agent", "runner.pipeline", "runner.isolation", "runner.envs", "cli"),
    "runner.pipeline": ("runner.agent", "cli"),
    "runner.agent": ("cli",),
    "runner.inside": (
        "runner.agent",
        "runner.isolation",
        "runner.envs",
        "runner.pipeline",
        "runner.cache",
        "runner.build",
        "runner.config",
        "cli",
    ),
    # the upload door stores a wheel and nothing else; what it sets off is the API's to call
    "service.uploads": (
        "service.jobs",
        "service.results",
        "service.outbound",
        "service.api",
        "service.web",
    ),
    # only the app mounts the routes and the pages
    "service.jobs": ("service.api", "service.web"),
    "service.results": ("service.api", "service.web", "service.uploads"),
    "service.outbound": ("service.api", "service.web", "service.uploads", "service.jobs"),
    "service.api": ("service.web",),
    # the watcher submits releases as the upload door does: never through the API or the pages
    "service.watch": ("service.api", "service.web", "service.outbound", "service.results"),
}


def room_of(module: str) -> str:
    """``runner.agent.client`` -> ``runner.agent``; ``runner.build`` -> itself; ``cli.x`` -> cli."""
    parts = module.split(".")
    if parts[0] in ("runner", "service") and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def room_offenders(rules: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    out = {}
    for package in ("runner", "service", "cli"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            forbidden = rules.get(room_of(".".join(parts)), ())
            bad = sorted(n for n in imported(path) if room_of(n) in forbidden)
            if bad:
                out[str(path.relative_to(ROOT))] = bad
    return out


def test_each_room_imports_only_what_its_table_allows() -> None:
    assert room_offenders(ROOMS) == {}
    # the check sees a room reaching up: the pipeline's own modules import the agent's config
    assert room_offenders({"runner.pipeline": ("runner.config",)}) != {}


def module_level(path: Path) -> set[str]:
    """What ``path`` imports when it is imported: its module's own statements, not a function's."""
    tree = ast.parse(path.read_text(), str(path))
    inner = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for n in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_commands_import_the_service_only_inside_serve() -> None:
    """A runner host has no FastAPI: ``fe-ci runner`` and ``fe-ci validate`` load cli/ without the
    service, which only ``fe-ci serve`` imports, inside the function that serves."""
    at_load = {
        str(p.relative_to(ROOT)): sorted(n for n in module_level(p) if n.split(".")[0] == "service")
        for p in sorted((ROOT / "cli").rglob("*.py"))
    }
    assert {k: v for k, v in at_load.items() if v} == {}
    anywhere = {
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "cli").rglob("*.py"))
        if any(n.split(".")[0] == "service" for n in imported(p))
    }
    assert anywhere == {"cli/serve.py"}
