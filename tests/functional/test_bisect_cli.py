"""``fe-ci bisect`` against a real local repository of a frontend-shaped package
(testkit/frontend_repo.py): the real builder makes every wheel, the real pipeline probes it, no
service runs. Then the answer's repro line is run as printed."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cli.common import EXIT_BAD_INPUT
from testkit import frontend_repo as fr
from testkit import processes
from testkit.service import ROOT, service_env

pytestmark = pytest.mark.slow


def fe_ci(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [sys.executable, "-m", "cli.main", *args], env=env, cwd=ROOT, text=True, timeout=600
    )


def test_bisect_names_the_commit_that_dropped_the_knob_and_its_repro_runs(
    tmp_path: Path, cache_dir: str
) -> None:
    repo = tmp_path / "frontend"
    shas = fr.history(repo)
    env = service_env(tmp_path / "data", FE_CI_CACHE_DIR=cache_dir)
    work = tmp_path / "work"
    argv = ["bisect", shas[0], "HEAD", "--repo", str(repo), "--stages", "probe"]
    out = fe_ci([*argv, "--work-dir", str(work)], env)
    assert out.returncode == 0, out.stderr[-3000:]
    # the five builds' probes forked one warm parent, kept for the whole search
    (held,) = (work / "zygotes").iterdir()  # the search's folder: one warm parent in it
    assert len([p for p in held.iterdir() if p.is_dir()]) == 1
    # and it ended with the search: nothing of it was left to kill by its uid
    assert "sandbox_uid_reaped" not in out.stderr, out.stderr
    assert f"the first bad commit is {shas[5]}" in out.stdout
    assert "subject: commit 6: drops the deterministic knob" in out.stdout
    assert f"author:  {fr.AUTHOR} <{fr.EMAIL}>" in out.stdout
    assert "builds: 3 between GOOD and BAD, 5 in all" in out.stdout
    repro = next(line for line in out.stdout.splitlines() if "reproduce:" in line)
    argv = shlex.split(repro.split("reproduce:", 1)[1])
    assert argv[:4] == ["fe-ci", "validate", "--commit", shas[5]]
    again = fe_ci(argv[1:], env)
    shown = [x.split() for x in again.stdout.splitlines() if x.strip().startswith("grouped_gemm_")]
    assert ["grouped_gemm_dsrelu", "no", "'deterministic'"] in shown, again.stdout[-3000:]


def test_bisect_refuses_what_is_not_a_transition(tmp_path: Path) -> None:
    repo = tmp_path / "frontend"
    fr.init(repo)
    first = fr.commit(repo, 1, knob=True)
    fr.commit(repo, 2, knob=True)
    env = service_env(tmp_path / "data")
    backwards = fe_ci(["bisect", "HEAD", first, "--repo", str(repo)], env)
    assert backwards.returncode == EXIT_BAD_INPUT and "does not descend" in backwards.stderr
    same = fe_ci(["bisect", first, "HEAD", "--repo", str(repo), "--stages", "probe"], env)
    assert same.returncode == 1 and "nothing that --stages probe checks turned red" in same.stderr
