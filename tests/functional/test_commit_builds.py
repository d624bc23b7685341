"""Commit builds end to end: real git repositories whose commits carry real frontend code (the
sources and compiled module of registry wheels, with a minimal build file), pushed through the
signed webhook, built by a builder runner, then probed. GitHub is the one fake: the tests send
the deliveries it would send."""

from __future__ import annotations

import email.parser
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runner.isolation import jail
from testkit import loopback, processes
from testkit.registry import registry_wheel
from testkit.service import ROOT, Service
from tests.helpers import push, send, wait_for

pytestmark = pytest.mark.slow

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "nvidia-cudnn-frontend"
version = "{version}"
requires-python = ">=3.9"

[project.optional-dependencies]
cutedsl = {cutedsl}

[tool.setuptools.packages.find]
include = ["cudnn*"]

[tool.setuptools.package-data]
"*" = ["*.so", "*.json", "*.txt", "*.h", "*.hpp"]
"""


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


# The build file's dependencies stay those of one release through the commits, as a repository's
# do between releases: the commits differ in code and in the version they claim, and the four
# builds share one dependency layer (the one ``fe-ci validate`` of a 1.27.0 wheel uses too).
DEPENDENCIES_OF = "1.27.0"


def cutedsl_extra(version: str) -> list[str]:
    """The ``cutedsl`` extra of the registry's wheel of ``version``."""
    with zipfile.ZipFile(registry_wheel(version)) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    return [
        r.split(";")[0].strip()
        for r in meta.get_all("Requires-Dist") or []
        if 'extra == "cutedsl"' in r
    ]


def commit_frontend(repo: Path, code_from: str, claims: str, message: str) -> str:
    """Replace the tree with ``code_from``'s package, reporting version ``claims``; commit."""
    for child in repo.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    with zipfile.ZipFile(registry_wheel(code_from)) as zf:
        zf.extractall(repo, [n for n in zf.namelist() if n.startswith("cudnn/")])
    cutedsl = cutedsl_extra(DEPENDENCIES_OF)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(version=claims, cutedsl=cutedsl))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def finished(report: dict) -> bool:
    return bool(report["status"] == "finished")


def kinds(report: dict) -> set[str]:
    return {f["kind"] for f in report["findings"]}


def test_the_seed_stories_through_webhook_builder_and_probe(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "cudnn-frontend"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "develop")
    svc: Service = make_service(FE_CI_REPO_URL=str(repo), FE_CI_GPU_ARCHS="")
    shas = [
        commit_frontend(repo, "1.28.0", "1.27.0", "deterministic knob, version not bumped yet"),
        commit_frontend(repo, "1.28.0", "1.28.0", "bump to 1.28.0"),
        commit_frontend(repo, "1.27.0", "1.28.0", "claims 1.28.0 with 1.27.0's wrapper"),
        commit_frontend(repo, "1.28.0", "1.28.0", "consistent again"),
    ]
    ids = []
    for i, sha in enumerate(shas):
        resp = send(svc, push(after=sha), delivery=f"d-{i}")
        assert resp.status_code == 200, resp.text
        ids.append(resp.json()["build_id"])
    with open(tmp_path / "runner.log", "wb") as log:
        runner = processes.popen(
            [sys.executable, "-m", "cli.main", "runner"],
            env=svc.runner_env(FE_CI_RUNNER_NAME="builder-1", FE_CI_RUNNER_LABELS="builder=1"),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        reports = [wait_for(svc, b, finished, timeout=900) for b in ids]  # one report a poll
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=120)
    log = (tmp_path / "runner.log").read_text()
    predates, fixed, liar, fixed_again = reports
    for r, sha in zip(reports, shas, strict=True):
        assert r["commit"] == sha and r["branch"] == "develop" and r["repo"] == str(repo)
        build_stage = r["jobs"][0]["stages"][0]
        assert build_stage["name"] == "build" and build_stage["status"] == "pass", log[-3000:]
        # the commit's code ran in the candidate's sandbox, and its job says so
        assert r["jobs"][0]["environment"]["sandbox"] == jail.isolation()
    assert predates["version"] == "1.27.0"
    assert "feature_predates_version" in kinds(predates)
    assert "version_feature_mismatch" not in kinds(predates)
    assert liar["version"] == "1.28.0"
    assert "version_feature_mismatch" in kinds(liar) and liar["verdict"] == "fail"
    assert "feature_regression" in kinds(liar)  # the previous build of develop had the knob
    for ok in (fixed, fixed_again):
        assert not {"feature_predates_version", "version_feature_mismatch"} & kinds(ok)
    # the wheel is kept by commit: the same commit again needs no build job
    resp = loopback.post(
        f"{svc.url}/validate",
        json={"commit": shas[1]},
        headers={"Authorization": "Bearer submit-token-for-tests"},
    )
    again = loopback.get(f"{svc.url}/api/builds/{resp.json()['build_id']}").json()
    assert [j["kind"] for j in again["jobs"]] == ["cpu"] and again["sha256"] == fixed["sha256"]


def test_unknown_commit_is_classified(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "develop")
    git(repo, "commit", "-q", "--allow-empty", "-m", "root")
    svc: Service = make_service(FE_CI_REPO_URL=str(repo), FE_CI_GPU_ARCHS="")
    build_id = send(svc, push(after="c" * 40)).json()["build_id"]
    proc = processes.run(
        [sys.executable, "-m", "cli.main", "runner", "--once"],
        env=svc.runner_env(FE_CI_RUNNER_NAME="b", FE_CI_RUNNER_LABELS="builder=1"),
        cwd=ROOT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
    stage = r["jobs"][0]["stages"][0]
    assert stage["status"] == "error" and stage["reason"].startswith("unknown_commit")
    assert r["jobs"][1]["status"] == "finished" and "no wheel" in r["jobs"][1]["reason"]
    assert r["status"] == "finished" and r["verdict"] == "error"


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_failed_build_names_its_cause_and_sees_its_build_requirements(
    installer: str, tmp_path: Path
) -> None:
    """The reason carries the build's own first error (a CMake message, as the frontend's build
    prints one), not the wrapping of it by pip or uv; the build runs with its build env's scripts
    first on PATH, so CMake finds what the build requirements installed (pybind11's config)."""
    from core import commits
    from runner import build
    from runner.envs import envs

    if installer == "uv" and envs.find_uv() is None:
        pytest.skip("uv is not installed beside the runner")

    src = tmp_path / "src"
    src.mkdir()
    (src / "setup.py").write_text(
        "import os, sys\n"
        "print('PATH0=' + os.environ['PATH'].split(os.pathsep)[0])\n"
        "print('CMake Error at CMakeLists.txt:39 (find_package):', file=sys.stderr)\n"
        "print('  Could not find `nvcc` executable in path', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    with pytest.raises(commits.BuildFailure) as err:
        build.build_wheel(
            src,
            tmp_path / "dist",
            work=tmp_path,
            log=tmp_path / "build.log",
            timeout_s=300,
            installer=installer,
        )
    assert err.value.kind == "build_failed"
    assert err.value.message.startswith("uv build" if installer == "uv" else "pip wheel")
    assert "CMake Error at CMakeLists.txt:39" in err.value.message
    assert "Could not find `nvcc`" in err.value.message
    log = (tmp_path / "build.log").read_text()
    assert f"PATH0={tmp_path / 'build-env' / 'bin'}" in log


def test_uv_and_pip_build_the_same_wheel_from_a_commit(tmp_path: Path) -> None:
    """The build starts the repository's backend through uv where the runner installs with uv,
    else through pip: the same commit gives a wheel of the same name and the same files."""
    from core import commits
    from runner import build
    from runner.envs import envs
    from testkit import frontend_repo as fr

    if envs.find_uv() is None:
        pytest.skip("uv is not installed beside the runner")
    repo = tmp_path / "repo"
    repo.mkdir()
    fr.git(repo, "init", "-q", "-b", "develop")
    sha = fr.commit(repo, 1, knob=True)
    log = tmp_path / "mirror.log"
    src = commits.export_tree(commits.ensure_commit(str(repo), sha, tmp_path / "cache", log), sha,
                            tmp_path / "src")  # fmt: skip
    contents = {}
    for installer in ("uv", "pip"):
        wheel = build.build_wheel(
            src, tmp_path / installer / "dist", work=tmp_path / installer,
            log=tmp_path / f"{installer}.log", timeout_s=300, installer=installer,
        )  # fmt: skip
        with zipfile.ZipFile(wheel) as zf:
            contents[installer] = (
                wheel.name,
                {n: zf.read(n) for n in zf.namelist() if not n.endswith(".dist-info/RECORD")},
            )
    assert contents["uv"] == contents["pip"]
    assert contents["uv"][0] == "nvidia_cudnn_frontend-1.4.0-py3-none-any.whl"


def test_a_commit_with_no_files_is_a_build_failure_not_a_crash(tmp_path: Path) -> None:
    from core import commits
    from testkit import frontend_repo as fr

    repo = tmp_path / "repo"
    repo.mkdir()
    fr.git(repo, "init", "-q", "-b", "develop")
    fr.git(repo, "commit", "-q", "--allow-empty", "-m", "nothing yet")
    sha = fr.git(repo, "rev-parse", "HEAD").strip()
    mirror = commits.ensure_commit(str(repo), sha, tmp_path / "cache", tmp_path / "mirror.log")
    with pytest.raises(commits.BuildFailure) as failed:
        commits.export_tree(mirror, sha, tmp_path / "src")
    assert failed.value.kind == "empty_tree"
    assert sha in failed.value.message
    assert not (tmp_path / f"{sha}.tar").exists()
