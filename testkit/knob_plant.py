"""A planted build of a real bug's size: ``indexer_top_k``'s kernel compiled without its knob.

1.32.0's ``IndexerTopK.compile`` (``cudnn/deepseek_sparse_attention/indexer_top_k/api.py``)
passes ``deterministic=self.deterministic`` to ``compile_topk_kernel``, whose default is the
non-deterministic specialization. The plant deletes that one keyword line, found by reading the
wheel's own source (``ast``): the wrapper still takes ``deterministic=True``, keys its cache on
it and checks support for it, and the kernel it compiles resolves ties at the cut-off in whatever
order its blocks finish, as the knob-off arm does. RECORD is rewritten to match
(``testkit.registry.doctor_wheel``); a release without the line once is refused, never planted
with nothing.

What catches it: the determinism stage on a GPU (``indexer_top_k``'s deterministic arm, whose
indices then vary under ties as the control's do: 7 of 7 on the H200). The probe does not: the
wrapper's signature and default are unchanged.

    .venv/bin/python -m testkit.knob_plant [--version 1.32.0 | --wheel W] --out DIR
"""

from __future__ import annotations

import ast
from pathlib import Path

from testkit.flag_plant import drop_line, plant_cli
from testkit.registry import doctor_wheel

API = "cudnn/deepseek_sparse_attention/indexer_top_k/api.py"
OWNER, METHOD, KERNEL = "IndexerTopK", "compile", "compile_topk_kernel"
KEYWORD = "deterministic=self.deterministic,"
DROPPED_KNOB = "indexer_top_k's kernel is compiled without its deterministic knob"
SUBJECT = "indexer_top_k"


def knob_line(source: bytes) -> int:
    """The 1-based number of the line passing the knob to the kernel in ``IndexerTopK.compile``."""
    tree = ast.parse(source)
    owners = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == OWNER]
    methods = [
        m for c in owners for m in c.body if isinstance(m, ast.FunctionDef) and m.name == METHOD
    ]
    if len(methods) != 1:
        raise ValueError(f"{API}: no single {OWNER}.{METHOD}()")
    found = [
        kw.lineno
        for call in ast.walk(methods[0])
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith(KERNEL)
        for kw in call.keywords
        if kw.arg == "deterministic" and ast.unparse(kw.value) == "self.deterministic"
    ]
    if len(found) != 1:
        raise ValueError(f"{API}: {len(found)} calls of {KERNEL} pass the knob; need one")
    return found[0]


def drop_knob(source: bytes) -> bytes:
    """``source`` without the kernel call's ``deterministic=`` line (and nothing else)."""
    return drop_line(source, knob_line(source), KEYWORD, API)


def plant_dropped_knob(src: Path, dest_dir: Path) -> Path:
    """A copy of the wheel ``src`` in ``dest_dir`` (same name) with the knob dropped."""
    return doctor_wheel(src, dest_dir, {API: drop_knob})


def main(argv: list[str] | None = None) -> int:
    return plant_cli(plant_dropped_knob, __doc__ or "", argv)


if __name__ == "__main__":
    raise SystemExit(main())
