"""The suite's own accounting (testkit/cpu_accounting.py, bench/suite_cpu.py): a real pytest run in
a subprocess, over a test that burns CPU in a child process and one that only waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testkit.service import ROOT

TESTS = """
import subprocess, sys, time

def test_child_burns():
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(6_000_000))"], check=True)

def test_only_waits():
    time.sleep(0.3)
"""


def test_each_test_gets_its_wall_and_its_childrens_cpu_and_the_bench_sums_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_sample.py").write_text(TESTS)
    rows_dir = tmp_path / "rows"
    env = {**os.environ, "FE_CI_CPU_ACCOUNTING_DIR": str(rows_dir), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "testkit.cpu_accounting", "-n", "0", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    [rows_file] = rows_dir.glob("rows-*.json")
    rows = {r["test"].split("::")[-1]: r for r in json.loads(rows_file.read_text())}
    assert set(rows) == {"test_child_burns", "test_only_waits"}
    assert rows["test_child_burns"]["cpu_children_s"] > 0.1
    assert rows["test_only_waits"]["cpu_children_s"] == 0
    assert rows["test_only_waits"]["wall_s"] >= 0.3
    table = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "suite_cpu.py"), str(rows_dir), "--top", "1"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert table.startswith("2 tests:")
    assert "test_sample.py" in table and "test_child_burns" in table.split("slowest")[1]
