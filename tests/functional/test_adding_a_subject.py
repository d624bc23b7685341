"""Adding a subject in the places docs/adding-a-subject.md names, and nowhere else.

The subject is made up (``tests/toy_subject``): a registry entry given through
``FE_CI_EXTRA_SUBJECTS`` and its module, with a small entry point that stands in for a new
frontend knob. It must then be probed by ``fe-ci validate``, run by the determinism harness and
shown on the dashboard, with no other file knowing about it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit import loopback
from testkit.service import ROOT, service_env

TOY = Path(__file__).resolve().parents[1] / "toy_subject"


@pytest.fixture
def extension() -> Iterator[Path]:
    """A copy of the extension in a folder the sandboxed candidate may read (the runner grants
    it the way there, as to the candidate's environment), outside pytest's private tree, whose
    mode another pytest session may reset."""
    with tempfile.TemporaryDirectory(prefix="fe-ci-extension-") as tmp:
        ext = Path(tmp) / "ext"
        shutil.copytree(TOY, ext, ignore=shutil.ignore_patterns("__pycache__"))
        ext.chmod(0o755)
        yield ext / "extra_subjects.py"


def test_a_subject_added_in_the_documented_places_is_probed_run_and_shown(
    tmp_path: Path, extension: Path, make_service: object
) -> None:
    env = service_env(tmp_path / "data", FE_CI_EXTRA_SUBJECTS=str(extension))

    # probed: fe-ci validate, on the interpreter that has the "build" (the toy entry point)
    out = tmp_path / "report.json"
    stages = "probe,determinism"
    cmd = [sys.executable, "-m", "cli.main", "validate", "--preinstalled", "--stages", stages]
    proc = subprocess.run(
        [*cmd, "--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.is_file(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    cap = report["capabilities"]["toy_sum_bwd"]
    assert (cap["importable"], cap["present"], cap["default"], cap["method"]) == (
        True,
        True,
        "None",
        "signature",
    )
    by_stage = {s["name"]: s for s in report["jobs"][0]["stages"]}
    probe_checks = {c["name"]: c for c in by_stage["probe"]["checks"]}
    assert probe_checks["toy_sum_bwd.deterministic"]["status"] == "pass"
    det_checks = {c["name"]: c for c in by_stage["determinism"]["checks"]}
    assert det_checks["toy_sum_bwd.deterministic"]["status"] == "skipped"  # no GPU here

    # run: the determinism harness finds the subject's module through the registry
    script = (
        "import json, torch\n"
        "from runner.inside import measure\n"
        "from core.subjects import SUBJECTS\n"
        "out = measure.measure_subject(SUBJECTS['toy_sum_bwd'].load(), torch.device('cpu'),"
        " measure.Settings())\n"
        "print(json.dumps({'check': out.check, 'numerics': out.numerics}, default=str))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(ROOT), "FE_CI_EXTRA_SUBJECTS": str(extension)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    check = measured["check"]
    assert check["name"] == "toy_sum_bwd.deterministic"
    assert check["status"] == "pass", check["detail"]
    assert check["metrics"]["control"]["varying"] > 0
    assert [c["status"] for c in measured["numerics"]] == ["pass"]

    # shown: the dashboard's grid has a column for it
    service = make_service(FE_CI_EXTRA_SUBJECTS=str(extension))  # type: ignore[operator]
    page = loopback.get(f"{service.url}/", timeout=30).text
    assert 'title="toy_sum_bwd"' in page


def test_without_the_extension_the_subject_is_nowhere(tmp_path: Path) -> None:
    """The same probe without FE_CI_EXTRA_SUBJECTS: the subject came from the extension only."""
    script = "from core.subjects import SUBJECTS; print(sorted(SUBJECTS))"
    env = {k: v for k, v in os.environ.items() if k != "FE_CI_EXTRA_SUBJECTS"}
    got = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "toy_sum_bwd" not in got.stdout and "sdpa_bwd" in got.stdout
