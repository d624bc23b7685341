"""Discovery of a build's determinism surface over real package folders written here: the
knobs of public entry points, the torch flag's readers, the cudnn op schemas; hostile names and
defaults bounded; source that does not parse named; 10,000 functions read within the bound."""

from __future__ import annotations

import time
from pathlib import Path

from core import surface
from runner.inside import discovery


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "cudnn"
    for name, text in files.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


def _knobs(doc: dict) -> dict[tuple[str, str], str | None]:
    return {(k["entry_point"], k["knob"]): k["default"] for k in doc["knobs"]}


def test_public_knobs_flag_readers_and_op_schemas_are_found(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "from .api import wrapper, Klass\n__all__ = ['wrapper']\n",
            "api.py": (
                "import torch\n"
                "def wrapper(x, deterministic: bool = False, *, is_deterministic=None): ...\n"
                "def hidden(x, deterministic=True): ...\n"
                "class Klass:\n    def __init__(self, use_deterministic_algorithm=False): ...\n"
                "    def execute(self, deterministic=False): ...\n"
                "    def _private(self, deterministic=False): ...\n"
                "def _bwd(x):\n    return torch.are_deterministic_algorithms_enabled()\n"
                "_lib = torch.library.Library('cudnn', 'FRAGMENT')\n"
                "_lib.define('op_bwd(Tensor a, bool is_deterministic=False) -> Tensor')\n"
            ),
            "sub/__init__.py": "_LAZY = {'lazy_fn': ('.impl', 'lazy_fn')}\n",
            "sub/impl.py": "def lazy_fn(deterministic_order=True, _deterministic=1): ...\n",
            "ops/__init__.py": "_LAZY = {'select': ('cudnn.kernels.sel', 'select')}\n",
            "kernels/__init__.py": "",
            "kernels/sel.py": "def select(x, deterministic=True): ...\n",
        },
    )
    doc = discovery.discover(pkg)
    assert _knobs(doc) == {
        ("cudnn.wrapper", "deterministic"): "False",
        ("cudnn.wrapper", "is_deterministic"): "None",
        ("cudnn.Klass", "use_deterministic_algorithm"): "False",
        ("cudnn.Klass.execute", "deterministic"): "False",
        ("cudnn.api._bwd", "torch flag"): discovery.FLAG_DEFAULT,
        ("torch.ops.cudnn.op_bwd [cudnn.api]", "is_deterministic"): "False",
        ("cudnn.sub.lazy_fn", "deterministic_order"): "True",
        ("cudnn.ops.select", "deterministic"): "True",  # re-exported by a package elsewhere
    }  # hidden: no __init__ names it; _deterministic: private
    assert doc["unparsed"] == [] and doc["truncated"] == ""


def test_source_that_does_not_parse_is_named_not_a_crash(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "from .ok import f\nfrom .broken import g\nfrom .nul import h\n",
            "ok.py": "def f(deterministic=False): ...\n",
            "broken.py": "def g(deterministic=False:\n",
            "nul.py": "def h(deterministic=False): ...\x00\n",
        },
    )
    doc = discovery.discover(pkg)
    assert _knobs(doc) == {("cudnn.f", "deterministic"): "False"}
    assert [u.split(":")[0] for u in doc["unparsed"]] == ["cudnn/broken.py", "cudnn/nul.py"]


def test_hostile_names_and_defaults_are_bounded_and_one_line(tmp_path: Path) -> None:
    long = "deterministic_" + "x" * 5000
    default = "'<script>alert(1)</script>\\n\\x1b[31m" + "A" * 3000 + "'"
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "from .api import *\n__all__ = ['wrap']\n",
            "api.py": f"def wrap({long}={default}): ...\n",
        },
    )
    (knob,) = discovery.discover(pkg)["knobs"]
    assert len(knob["knob"]) == discovery.NAME_CHARS and knob["knob"].endswith("…")
    assert len(knob["default"]) == discovery.DEFAULT_CHARS
    assert knob["default"].startswith("'<script>")  # kept as text: each medium escapes it
    assert not any(ord(c) < 32 for c in knob["default"] + knob["knob"])


def test_ten_thousand_functions_are_read_within_the_bound(tmp_path: Path) -> None:
    names = [f"fn_{i}" for i in range(10_000)]
    body = "".join(f"def {n}(x, deterministic=False): ...\n" for n in names)
    pkg = _package(
        tmp_path, {"__init__.py": f"__all__ = {names!r}\nfrom .big import *\n", "big.py": body}
    )
    start = time.monotonic()
    doc = discovery.discover(pkg, seconds=discovery.SECONDS)
    took = time.monotonic() - start
    assert took < discovery.SECONDS
    assert len(doc["knobs"]) == discovery.MAX_KNOBS  # bounded, and it says so
    assert "knob bound" in doc["truncated"]


def test_a_time_bound_stops_the_read_and_says_so(tmp_path: Path) -> None:
    files = {"__init__.py": "from .m0 import f\n"}
    files |= {f"m{i}.py": "def f(deterministic=False): ...\n" for i in range(50)}
    doc = discovery.discover(_package(tmp_path, files), seconds=0.0)
    assert doc["truncated"].startswith("time bound") and doc["files"] == 0


def test_knobs_no_subject_covers_are_findings_and_coverage_says_where(tmp_path: Path) -> None:
    knobs = [
        {"entry_point": "cudnn.grouped_gemm_dsrelu_wrapper_sm100", "knob": "deterministic",
         "default": "None", "kind": "parameter", "method": "ast"},
        {"entry_point": "cudnn.flex_attn_func", "knob": "deterministic", "default": "False",
         "kind": "parameter", "method": "ast"},
        {"entry_point": "cudnn.new_wrapper", "knob": "deterministic", "default": "False",
         "kind": "parameter", "method": "ast"},
    ]  # fmt: skip
    found = surface.uncovered(knobs)
    assert [f["kind"] for f in found] == ["knob_not_covered"]
    assert "cudnn.new_wrapper(deterministic=False)" in found[0]["message"]
    rows = surface.coverage(knobs, {"flex_attention_bwd": {"sm_90"}}, {"grouped_gemm_dsrelu"})
    assert [r["status"] for r in rows] == ["compile_only", "exercised", "not_covered"]
    assert surface.summary(rows) == (
        "3 knobs: 1 exercised, 1 compile-only, 0 refusal-only, 1 not covered"
    )
    cpu_only = surface.coverage(knobs, {}, set())
    assert cpu_only[1]["why"] == (
        "would run as flex_attention_bwd on sm_90, sm_100; no job of those families ran it"
    )


def test_changes_along_a_line() -> None:
    a = {"entry_point": "cudnn.f", "knob": "deterministic", "default": "False"}
    b = {"entry_point": "cudnn.g", "knob": "deterministic", "default": "None"}
    c = {"entry_point": "cudnn.h", "knob": "is_deterministic", "default": "False"}
    found = surface.changes([a, b], [{**b, "default": "False"}, c])
    assert [(f["kind"], f["severity"]) for f in found] == [
        ("knob_removed", "error"),
        ("knob_default_changed", "warning"),
        ("knob_added", "info"),
    ]
    assert surface.changes([a, b], [a, b]) == []


def test_knob_not_covered_findings_stay_bounded() -> None:
    knobs = [
        {"entry_point": f"cudnn.fn_{i}", "knob": "deterministic", "default": "False"}
        for i in range(400)
    ]
    found = surface.uncovered(knobs)
    assert len(found) == surface.MAX_NAMED + 1
    assert found[-1]["message"].startswith("300 more knobs")
