"""Adding a subject the way docs/adding-a-subject.md says: one module, and nowhere else.

The subject is made up (``tests/toy_subject/toy_sum_bwd.py``: its declaration and its harness),
with a small entry point that stands in for a new frontend knob. Given through
``FE_CI_EXTRA_SUBJECTS``, it must be probed by ``fe-ci validate``, run by the determinism harness
and shown on the dashboard; written as the one new file of a copy of the tree, it must show up in
the probe, the coverage, ``fe-ci configs`` and the service's subject list.
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
from testkit.service import ROOT, Service, service_env

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
        yield ext


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


# ------------------------------------------------- a subject added as a built-in: one new file

TREE = ("core", "runner", "cli", "service")
HARNESS = TOY / "toy_sum_bwd.py"


def _git(tree: Path, *args: str) -> str:
    who = ("-c", "user.name=fe-ci", "-c", "user.email=fe-ci@localhost")
    return subprocess.run(
        ["git", *who, *args], cwd=tree, capture_output=True, text=True, check=True, timeout=60
    ).stdout


@pytest.fixture
def copy() -> Iterator[Path]:
    """A committed copy of fe-ci's source in a folder the sandboxed candidate may read, and a
    build beside it: a venv whose ``cudnn`` package is a stand-in frontend with one new knob,
    ``cudnn.sum_bwd(x, *, deterministic=None)`` (no frontend release has one to add a subject
    for; the probe reads its source and signature as it reads a real wheel's)."""
    with tempfile.TemporaryDirectory(prefix="fe-ci-copy-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        tree = root / "tree"
        for part in TREE:
            shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(ROOT / ".gitignore", tree / ".gitignore")  # byte code the runs leave
        _git(tree, "init", "-q")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", "fe-ci as it is")
        venv = root / "build"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "cudnn").mkdir()
        (site / "cudnn" / "__init__.py").write_text(
            '__version__ = "1.99.0"\n\nfrom cudnn.toy import sum_bwd\n\n__all__ = ["sum_bwd"]\n'
        )
        shutil.copyfile(TOY / "toy_frontend.py", site / "cudnn" / "toy.py")
        host_site = Path(torch_site())
        (site / "host.pth").write_text(f"{host_site}\n")  # the host's torch, as envs.py reuses it
        yield tree


def torch_site() -> str:
    import torch

    return str(Path(torch.__file__).parents[1])


def _in(tree: Path, *argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -P -m cli.main ARGV`` on the copy alone (``-P``: not this checkout's folder)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    return subprocess.run(
        [sys.executable, "-P", "-m", "cli.main", *argv],
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(tree), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_one_new_file_in_the_subjects_folder_adds_a_subject_everywhere(
    copy: Path, tmp_path: Path
) -> None:
    """The toy subject written as a built-in, one file in ``runner/inside/subjects/``: the probe
    probes it, the coverage maps the build's new knob to it, ``fe-ci configs`` lists its configs
    and the service's grid has its column. Nothing else of the tree changed."""
    text = HARNESS.read_text().replace("toy_frontend", "cudnn.toy")
    added = copy / "runner" / "inside" / "subjects" / "toy_sum_bwd.py"
    before = _in(copy, "configs", cwd=tmp_path)
    assert before.returncode == 0 and "toy_sum_bwd" not in before.stdout, before.stderr
    added.write_text(text)
    assert _git(copy, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        "?? runner/inside/subjects/toy_sum_bwd.py"
    ]

    # the probe and the coverage: fe-ci validate on the stand-in build
    out = tmp_path / "report.json"
    python = str(next(copy.parent.glob("build/bin/python")))
    proc = _in(copy, "validate", "--preinstalled", "--python", python, "--stages", "probe",
               "--json", str(out), cwd=tmp_path)  # fmt: skip
    assert out.is_file(), proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    cap = report["capabilities"]["toy_sum_bwd"]
    assert (cap["present"], cap["default"]) == (True, "None"), cap
    (stage,) = [s for s in report["jobs"][0]["stages"] if s["name"] == "probe"]
    checks = {c["name"]: c["status"] for c in stage["checks"]}
    assert checks["toy_sum_bwd.deterministic"] == "pass"
    (row,) = [r for r in report["coverage"]["rows"] if r["entry_point"].endswith("sum_bwd")]
    assert (row["subject"], row["families"]) == ("toy_sum_bwd", ["sm_90"]), row
    assert "would run as toy_sum_bwd on sm_90" in row["why"]
    assert not any("sum_bwd" in f["message"] for f in report["findings"]
                   if f["kind"] == "knob_not_covered")  # fmt: skip

    # the configs command
    configs = _in(copy, "configs", "toy_sum_bwd", cwd=tmp_path)
    assert configs.returncode == 0 and "n4096" in configs.stdout and "n65536" in configs.stdout

    # the service's subject list: the grid's columns
    data = tmp_path / "data"
    command = [sys.executable, "-P", "-m", "cli.main", "serve", "--port", "{port}"]
    svc = Service(data, service_env(data, PYTHONPATH=str(copy)), command=command).start()
    try:
        page = loopback.get(f"{svc.url}/", timeout=30).text
    finally:
        svc.stop()
    assert 'title="toy_sum_bwd"' in page
