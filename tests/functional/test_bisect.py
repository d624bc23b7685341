"""Bisection end to end: a real git repository of a small frontend-shaped package
(testkit/frontend_repo.py), the signed webhook, a real builder runner building every commit into a
wheel and probing it, the service's own mirror and ``git rev-list --ancestry-path``.

GitHub is the one fake: the tests send the deliveries it would send, and its status API is a
local recorder on 127.0.0.1 (``tests.github_recorder``). The repository lives under a
``github.com/NVIDIA/cudnn-frontend`` directory so that statuses are enabled for it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from testkit import frontend_repo as fr
from testkit import loopback
from testkit.service import ROOT, Service
from tests.bisecting import bisection_of, red_after_green, repo_dir, wait_bisection
from tests.github_recorder import GitHubRecorder
from tests.helpers import CHROMIUM, chromium, push, send

pytestmark = pytest.mark.slow

SHOTS = ROOT / "docs" / "screenshots"


def test_a_push_of_nine_commits_is_bisected_to_the_commit_that_dropped_the_knob(
    make_service: Any, builder_runner: Any, tmp_path: Path, cache_dir: str
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
    builder_runner(svc)
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
        report = loopback.get(f"{svc.url}/api/builds/{step['build_id']}").json()
        assert report["commit"] == step["commit"]
        assert [j["kind"] for j in report["jobs"]] == ["build", "cpu"]
        assert [s["name"] for s in report["jobs"][1]["stages"]] == ["install", "probe"]
        assert step["verdict"] in ("present", "absent")
        page = loopback.get(f"{svc.url}/builds/{step['build_id']}").text
        assert f'href="/bisections/{b["id"]}"' in page
    # the red build's page links to its bisection
    assert f'href="/bisections/{b["id"]}"' in loopback.get(f"{svc.url}/builds/{bad}").text
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
    make_service: Any, builder_runner: Any, tmp_path: Path, cache_dir: str
) -> None:
    repo = repo_dir(tmp_path)
    shas = fr.history(repo, unbuildable=frozenset({5}))
    svc: Service = make_service(
        FE_CI_REPO_URL=str(repo), FE_CI_SWEEP_INTERVAL_S="1", FE_CI_CACHE_DIR=cache_dir
    )
    builder_runner(svc)
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
