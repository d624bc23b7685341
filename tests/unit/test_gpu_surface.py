"""bench/gpu_surface.py run as a program (tests do not import bench): its argument checks, and the
document it writes where no CUDA device is present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_surface.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--sections", "nope"], "unknown or no sections ['nope']"),
        (["--sections", ""], "unknown or no sections []"),
        (["--runs", "1"], "--runs must be between 2 and 64"),
        (["--budget-s", "0"], "must be positive"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], says: str) -> None:
    proc = run(*argv)
    assert proc.returncode == 2 and says in proc.stderr
    assert proc.stdout == ""


def test_list_names_every_section() -> None:
    proc = run("--list")
    assert proc.returncode == 0
    names = [line.split(":")[0] for line in proc.stdout.splitlines()]
    assert names == [
        "sdpa_torch",
        "sdpa_bwd_op",
        "pygraph_sdpa",
        "sdpa_fp8",
        "causal_conv1d",
        "dsa",
        "indexer_top_k",
        "flex",
    ]


def test_without_cuda_it_writes_a_document_saying_so(tmp_path: Path) -> None:
    out = tmp_path / "surface.json"
    proc = run("--sections", "sdpa_torch,flex", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc == json.loads(proc.stdout)
    assert doc["skipped"] == "no CUDA device" and doc["results"] == []
    assert doc["environment"]["cuda_available"] is False
