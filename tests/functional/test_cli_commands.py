"""``fe-ci --version``, ``fe-ci configs``, what ``submit --wait`` and ``serve`` say, and the
progress line on a terminal: the real CLI in a subprocess, against a real service."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from rich.console import Console

from cli.progress import DOING, StageProgress
from core.subjects import SUBJECTS
from core.wire import Stage, StageResult, Status
from testkit import loopback, processes
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update({"PYTHONPATH": str(ROOT), "FE_CI_RUNNER_LABELS": ""}, **extra)
    return env


def fe_ci(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=_env(**extra),
        text=True,
        timeout=120,
    )


def test_version(tmp_path: Path) -> None:
    proc = fe_ci("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"fe-ci {metadata.version('fe-ci')}"


def test_configs_lists_each_subjects_configs_small_to_large(tmp_path: Path) -> None:
    proc = fe_ci("configs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name, subject in SUBJECTS.items():
        assert f"{name}  (knob {subject.knob}" in proc.stdout
        names = [c.name for c in subject.load().configs]
        # its own section (subjects may share a config's name): from its line to the next
        section = proc.stdout[proc.stdout.index(f"{name}  (knob ") :]
        after = [section.find(f"\n{other}  (knob ") for other in SUBJECTS if other != name]
        section = section[: min([a for a in after if a > 0], default=len(section))]
        at = [section.index(f"  {c} ") for c in names]
        assert at == sorted(at), name  # in escalation order
    one = fe_ci("configs", "sdpa_bwd", cwd=tmp_path)
    assert one.returncode == 0 and "b4_h16_s2048_d128_causal" in one.stdout
    assert "grouped_gemm" not in one.stdout and "b=4 h=16 s=2048" in one.stdout


def test_submit_wait_says_no_capable_runner_is_alive(tmp_path: Path, make_service) -> None:  # type: ignore[no-untyped-def]
    """No runner at all, sm_100 required by the fleet's settings: the wait says what is missing,
    as the build page does."""
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_100")
    wheel = make_wheel(tmp_path / "w", "1.32.0", "")
    env = _env(FE_CI_URL=svc.url, FE_CI_SUBMIT_TOKEN=svc.env["FE_CI_SUBMIT_TOKEN"])
    proc = processes.popen(
        [sys.executable, "-m", "cli.main", "submit", str(wheel), "--wait"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()  # "build 1: http://..."
        build_id = int(first.split(":", 1)[0].removeprefix("build "))
        line = proc.stderr.readline()  # plain lines: stderr is not a terminal
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "sm_100 job: waiting: no runner with arch=sm_100 is alive" in line, line
    assert "cpu job: waiting: no runner is alive" in line, line
    report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    assert {j["waiting"] for j in report["jobs"]} == {
        "no runner with arch=sm_100 is alive",
        "no runner is alive",
    }
    page = loopback.get(f"{svc.url}/builds/{build_id}").text
    assert "no runner with arch=sm_100 is alive" in page


def test_serve_refuses_an_unknown_required_check(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = fe_ci(
        "serve", "--port", "9", cwd=tmp_path, FE_CI_REQUIRE="probe,sm_120",
        FE_CI_DATA_DIR=str(tmp_path / "data"),
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "FE_CI_REQUIRE: unknown required check(s) sm_120" in proc.stderr
    assert "known: all, build, install, probe" in proc.stderr and "sm_100" in proc.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was written
    assert time.monotonic() - started < 120


def test_progress_on_a_terminal_is_a_live_line_with_the_time_so_far() -> None:
    """rich draws the line on a terminal; the finished stage is one plain line after it."""
    screen = io.StringIO()
    out = Console(file=screen, force_terminal=True, width=120)
    with StageProgress(out) as shown:
        shown.started(Stage.determinism)
        shown.line.bar.refresh()  # type: ignore[union-attr]
        drawn = screen.getvalue()
        shown.finished(StageResult(name=Stage.determinism, status=Status.pass_, reason="ok"))
    assert DOING[Stage.determinism] in drawn and "0:00:0" in drawn
    assert "determinism  pass" in screen.getvalue()
    plain = io.StringIO()
    with StageProgress(Console(file=plain, force_terminal=False)) as shown:
        shown.started(Stage.install)
        shown.finished(StageResult(name=Stage.install, status=Status.pass_, reason="installed"))
    assert plain.getvalue().splitlines()[0].startswith("  ... install")
    assert "\x1b[" not in plain.getvalue()  # no terminal codes in a log
