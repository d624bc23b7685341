"""Bisection end to end: a real git repository of a small frontend-shaped package
(testkit/frontend_repo.py), the signed webhook, a real builder runner building every commit into a
wheel and probing it, the service's own mirror and ``git rev-list --ancestry-path``.

GitHub is the one fake: the tests send the deliveries it would send, and its status API is a
local recorder on 127.0.0.1 (``tests.github_recorder``). The repository lives under a
``github.com/NVIDIA/cudnn-frontend`` directory so that statuses are enabled for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.service import ROOT, SUBMIT, Service
from testkit import frontend_repo as fr
from tests.github_recorder import GitHubRecorder
from tests.helpers import CHROMIUM, chromium, push, send

pytestmark = pytest.mark.slow

SHOTS = ROOT / "docs" / "screenshots"


def repo_dir(tmp_path: Path) -> Path:
    return tmp_path / "github.com" / "NVIDIA" / "cudnn-frontend"


def wait_build(svc: Service, build_id: int, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        report = httpx.get(f"{svc.url}/api/builds/{build_id}").json()
        if report["status"] in ("finished", "cancelled"):
            return report
        time.sleep(0.5)
    raise AssertionError(f"build {build_id} did not finish: {report['jobs']}")


def bisection_of(svc: Service, build_id: int, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = httpx.get(f"{svc.url}/api/bisections", params={"build": build_id}).json()["items"]
        if items:
            return items[0]
        time.sleep(0.5)
    raise AssertionError(f"no bisection for build {build_id}")


def wait_bisection(svc: Service, bisection_id: int, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        b = httpx.get(f"{svc.url}/api/bisections/{bisection_id}").json()
        if b["state"] not in ("opening", "running"):
            return b
        time.sleep(1)
    raise AssertionError(f"bisection {bisection_id} still {b['state']}: {b['steps']}")


def runner_env(svc: Service) -> dict[str, str]:
    return svc.runner_env(FE_CI_RUNNER_NAME="builder-1", FE_CI_RUNNER_LABELS="builder=1")


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Any]:
    """``runner(svc)`` starts a builder runner that serves until the test ends."""
    procs: list[subprocess.Popen[bytes]] = []

    def _start(svc: Service) -> None:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "runner.cli", "runner"],
                env=runner_env(svc),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / "runner.log", "ab"),  # noqa: SIM115
            )
        )

    yield _start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def run_once(svc: Service, times: int) -> None:
    """A builder runner that takes one job and exits, ``times`` over: the queue moves in steps."""
    for _ in range(times):
        proc = subprocess.run(
            [sys.executable, "-m", "runner.cli", "runner", "--once"],
            env=runner_env(svc),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]


def red_after_green(svc: Service, shas: list[str], *, serve: bool = True) -> tuple[int, int]:
    """Push commit 1 (built green), then one push of the rest: the red build."""
    good = send(svc, push(after=shas[0]), delivery="d-good").json()["build_id"]
    if not serve:
        run_once(svc, 2)  # its build job and its probe
    first = wait_build(svc, good)
    assert first["verdict"] != "fail", first["verdict_reason"]
    assert first["capabilities"]["grouped_gemm_dsrelu"]["present"]
    bad = send(svc, push(after=shas[-1]), delivery="d-bad").json()["build_id"]
    if not serve:
        run_once(svc, 2)
    report = wait_build(svc, bad)
    assert report["verdict"] == "fail", report["verdict_reason"]
    assert "feature_regression" in {f["kind"] for f in report["findings"]}
    return good, bad


def test_a_push_of_nine_commits_is_bisected_to_the_commit_that_dropped_the_knob(
    make_service: Any, runner: Any, tmp_path: Path, cache_dir: str
) -> None:
    github = GitHubRecorder()
    repo = repo_dir(tmp_path)
    shas = fr.history(repo)  # the knob is gone from commit 6 on
    svc: Service = make_service(
        FE_CI_REPO_URL=str(repo),
        FE_CI_GITHUB_TOKEN="gh-token-for-tests",
        FE_CI_GITHUB_API_URL=github.url,
        FE_CI_SWEEP_INTERVAL_S="1",
        FE_CI_CACHE_DIR=cache_dir,
    )
    runner(svc)
    good, bad = red_after_green(svc, shas)
    b = wait_bisection(svc, bisection_of(svc, bad)["id"])

    assert b["state"] == "finished", b
    assert (b["good"]["build_id"], b["bad"]["build_id"]) == (good, bad)
    assert b["commits"] == 9 and b["question"]["rule"] == "feature_regression"
    answer = b["answer"]
    assert answer["outcome"] == "found"
    assert answer["first_bad"] == {
        "sha": shas[5],
        "subject": "commit 6: drops the deterministic knob",
        "author": f"{fr.AUTHOR} <{fr.EMAIL}>",
    }
    assert answer["repro"] == f"fe-ci validate --commit {shas[5]} --repo {repo} --stages probe"
    assert 1 <= b["builds_used"] <= 4
    marks = {s["commit"]: s["mark"] for s in b["steps"]}
    assert marks[shas[5]] == "bad" and all(
        m == ("bad" if shas.index(c) >= 5 else "good") for c, m in marks.items()
    )
    for step in b["steps"]:  # only the deciding stage ran, and the build says whose step it is
        report = httpx.get(f"{svc.url}/api/builds/{step['build_id']}").json()
        assert report["commit"] == step["commit"]
        assert [j["kind"] for j in report["jobs"]] == ["build", "cpu"]
        assert [s["name"] for s in report["jobs"][1]["stages"]] == ["install", "probe"]
        assert step["verdict"] in ("present", "absent")
        page = httpx.get(f"{svc.url}/builds/{step['build_id']}").text
        assert f'href="/bisections/{b["id"]}"' in page
    # the red build's page links to its bisection
    assert f'href="/bisections/{b["id"]}"' in httpx.get(f"{svc.url}/builds/{bad}").text
    # GitHub heard of the two pushed commits and of no bisection step
    time.sleep(1)
    pushed = {shas[0], shas[-1]}
    calls = github.wait_until(lambda calls: pushed <= {c.path.rsplit("/", 1)[-1] for c in calls})
    posted = {c.path.rsplit("/", 1)[-1] for c in calls if "/statuses/" in c.path}
    assert pushed <= posted
    assert not posted & {s["commit"] for s in b["steps"]}, posted
    github.close()
    if CHROMIUM.exists():
        page_in_browser(svc, bad, b)


def page_in_browser(svc: Service, bad: int, b: dict[str, Any]) -> None:
    """From the red build's page to the bisection page, in a real headless Chromium."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(f"{svc.url}/builds/{bad}")
        page.click("#bisection-link a")
        page.wait_for_url(f"**/bisections/{b['id']}")
        assert page.text_content("#first-bad") == b["answer"]["first_bad"]["sha"]
        assert "drops the deterministic knob" in (page.text_content("#first-bad-subject") or "")
        assert page.text_content("#repro") == b["answer"]["repro"]
        rows = page.eval_on_selector_all("#steps tbody tr", "rs => rs.length")
        assert rows == len(b["steps"]) + 2  # good, the steps, bad
        if os.environ.get("FE_CI_SCREENSHOTS") == "1":  # tests leave tracked files alone
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "bisection.png"), full_page=True)
        browser.close()


def test_a_commit_that_does_not_build_is_skipped_and_a_newer_push_does_not_cancel(
    make_service: Any, runner: Any, tmp_path: Path, cache_dir: str
) -> None:
    repo = repo_dir(tmp_path)
    shas = fr.history(repo, unbuildable=frozenset({5}))
    svc: Service = make_service(
        FE_CI_REPO_URL=str(repo), FE_CI_SWEEP_INTERVAL_S="1", FE_CI_CACHE_DIR=cache_dir
    )
    runner(svc)
    _, bad = red_after_green(svc, shas)
    opened = bisection_of(svc, bad)
    newer = fr.commit(repo, 11, knob=False)
    send(svc, push(after=newer), delivery="d-newer")
    b = wait_bisection(svc, opened["id"])
    assert b["state"] == "finished", b
    answer = b["answer"]
    assert answer["outcome"] == "range" and answer["first_bad"] is None
    assert answer["candidates"] == [shas[4], shas[5]]
    assert "one of 2 commits" in answer["sentence"] and "skipped" in answer["sentence"]
    skipped = next(s for s in b["steps"] if s["commit"] == shas[4])
    assert skipped["mark"] == "skip" and "build fail" in skipped["verdict"]


def test_the_cap_ends_the_search_with_a_range(
    make_service: Any, tmp_path: Path, cache_dir: str
) -> None:
    repo = repo_dir(tmp_path)
    shas = fr.history(repo)
    svc: Service = make_service(
        FE_CI_REPO_URL=str(repo), FE_CI_BISECT_MAX_BUILDS="1", FE_CI_CACHE_DIR=cache_dir
    )
    _, bad = red_after_green(svc, shas, serve=False)
    opened = bisection_of(svc, bad)
    run_once(svc, 2)  # the one step the cap allows: its build job and its probe
    b = wait_bisection(svc, opened["id"], timeout=120)
    assert b["state"] == "finished" and b["builds_used"] == 1 and b["max_builds"] == 1
    assert b["answer"]["outcome"] == "capped"
    assert b["answer"]["candidates"] == shas[1:6]  # commit 6 was bad: 2..6 remain
    assert "cap" in b["answer"]["sentence"]


def test_cancel_ends_the_bisection_and_its_step_build(
    make_service: Any, tmp_path: Path, cache_dir: str
) -> None:
    repo = repo_dir(tmp_path)
    shas = fr.history(repo)
    svc: Service = make_service(FE_CI_REPO_URL=str(repo), FE_CI_CACHE_DIR=cache_dir)
    _, bad = red_after_green(svc, shas, serve=False)
    deadline = time.monotonic() + 60
    while not (b := bisection_of(svc, bad))["steps"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert b["state"] == "running" and len(b["steps"]) == 1
    url = f"{svc.url}/api/bisections/{b['id']}/cancel"
    refused = httpx.post(url)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    done = httpx.post(url, headers={"Authorization": f"Bearer {SUBMIT}"})
    assert done.status_code == 200 and done.json()["state"] == "cancelled"
    step = httpx.get(f"{svc.url}/api/builds/{b['steps'][0]['build_id']}").json()
    assert step["status"] == "cancelled"
    time.sleep(2)  # the driver's next pump queues nothing for a cancelled bisection
    after = httpx.get(f"{svc.url}/api/bisections/{b['id']}").json()
    assert after["state"] == "cancelled" and len(after["steps"]) == 1
    again = httpx.post(url, headers={"Authorization": f"Bearer {SUBMIT}"})
    assert again.status_code == 409


def test_a_determinism_step_runs_one_subject_on_its_family_only(tmp_path: Path) -> None:
    """A step for a determinism question queues the one GPU job of its family with the one
    subject (the migrated schema, a real SQLite file; no GPU needed to queue it)."""
    from runner.transitions import Question
    from runner.wire import Stage
    from service import bisect, db
    from service.config import Settings
    from service.models import Bisection, Job

    settings = Settings(data_dir=tmp_path, gpu_archs=["sm_90", "sm_100"])
    db.migrate(settings.url)
    sessions = db.session_factory(db.make_engine(settings.url))
    question = Question(
        rule="determinism_check",
        subject="sdpa_bwd",
        family="sm_90",
        check="sdpa_bwd.deterministic",
        good="pass",
        bad="fail",
        stages=[Stage.install, Stage.probe, Stage.determinism],
    )
    driver = bisect.Driver(settings, sessions, on_queued=lambda: None)
    with sessions() as session:
        b = Bisection(
            repo="r",
            branch="develop",
            good_commit="1" * 40,
            bad_commit="3" * 40,
            question=question.model_dump(mode="json"),
            commits=["2" * 40, "3" * 40],
            state=bisect.RUNNING,
            max_builds=8,
            candidates=[],
        )
        session.add(b)
        session.flush()
        assert driver._advance(session, b) == 1
        session.commit()
        jobs = session.query(Job).all()
    assert [(j.kind, j.family, j.stages, j.subjects) for j in jobs] == [
        ("build", None, ["build"], None),
        ("gpu", "sm_90", ["install", "probe", "determinism"], ["sdpa_bwd"]),
    ]
