"""A stage's process ends as soon as its document is written (``runner/inside/_io.py::main``).

A real interpreter runs a stage function through ``main``: the function registers an exit
handler (standing for what the interpreter would tear down after the document) and writes to
stdout without flushing. The document must be on disk, the output flushed, the exit status 0,
and the handler never run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAGE = """
import atexit, pathlib, sys
from runner.inside._io import main

def stage(params):
    atexit.register(lambda: pathlib.Path(params["marker"]).write_text("torn down"))
    sys.stdout.write("said, not flushed")
    if params.get("fail"):
        raise RuntimeError("the candidate broke")
    return {"status": "pass", "reason": "fine"}

main(stage)
"""


def _run(tmp_path: Path, **params: object) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker, doc = tmp_path / "marker", tmp_path / "doc.json"
    (tmp_path / "in.json").write_text(json.dumps({"marker": str(marker), **params}))
    argv = [sys.executable, "-c", STAGE, "--in", str(tmp_path / "in.json"), "--out", str(doc)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return done, marker


def test_the_process_ends_once_its_document_is_written(tmp_path: Path) -> None:
    done, marker = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "doc.json").read_text()) == {"status": "pass", "reason": "fine"}
    assert done.stdout == "said, not flushed"
    assert not marker.exists()  # no exit handler ran: nothing was torn down


def test_a_stage_that_raises_still_writes_its_error_and_ends(tmp_path: Path) -> None:
    done, marker = _run(tmp_path, fail=True)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "doc.json").read_text())
    assert doc["status"] == "error" and doc["reason"] == "RuntimeError: the candidate broke"
    assert not marker.exists()
