"""Bisection steps: the cap on builds, cancelling a bisection and its step's build, and which job
a determinism question's step queues. The repository is testkit/frontend_repo.py's; to cancel a
step before any runner takes it, builder runners take one job and exit, so the queue moves in
steps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from testkit import frontend_repo as fr
from testkit import loopback
from testkit.service import SUBMIT, Service
from testkit.waiting import eventually
from tests.bisecting import bisection_of, red_after_green, repo_dir, wait_bisection

pytestmark = pytest.mark.slow


def test_the_cap_ends_the_search_with_a_range(
    make_service: Any, builder_runner: Any, tmp_path: Path, cache_dir: str
) -> None:
    """A runner that serves on would take every step the service queued: the cap is the
    service's, one step here."""
    repo = repo_dir(tmp_path)
    shas = fr.history(repo)
    svc: Service = make_service(
        FE_CI_REPO_URL=str(repo), FE_CI_BISECT_MAX_BUILDS="1", FE_CI_CACHE_DIR=cache_dir
    )
    builder_runner(svc)
    _, bad = red_after_green(svc, shas)
    b = wait_bisection(svc, bisection_of(svc, bad)["id"], timeout=120)
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
    b = eventually(
        lambda: bisection_of(svc, bad),
        until=lambda b: b["steps"],
        timeout=60,
        interval=0.5,
        message=f"the first step of the bisection of build {bad}",
    )
    assert b["state"] == "running" and len(b["steps"]) == 1
    url = f"{svc.url}/api/bisections/{b['id']}/cancel"
    refused = loopback.post(url)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    done = loopback.post(url, headers={"Authorization": f"Bearer {SUBMIT}"})
    assert done.status_code == 200 and done.json()["state"] == "cancelled"
    step = loopback.get(f"{svc.url}/api/builds/{b['steps'][0]['build_id']}").json()
    assert step["status"] == "cancelled"
    time.sleep(2)  # the driver's next pump queues nothing for a cancelled bisection
    after = loopback.get(f"{svc.url}/api/bisections/{b['id']}").json()
    assert after["state"] == "cancelled" and len(after["steps"]) == 1
    again = loopback.post(url, headers={"Authorization": f"Bearer {SUBMIT}"})
    assert again.status_code == 409


def test_a_determinism_step_runs_one_subject_on_its_family_only(tmp_path: Path) -> None:
    """A step for a determinism question queues the one GPU job of its family with the one
    subject (the migrated schema, a real SQLite file; no GPU needed to queue it)."""
    from core.transitions import Question
    from core.wire import Stage
    from service import db
    from service.config import Settings
    from service.jobs import bisection_runs
    from service.models import Bisection, Job
    from service.results import events

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
    driver = bisection_runs.Driver(events.Reactions(settings), sessions, on_queued=lambda: None)
    with sessions() as session:
        b = Bisection(
            repo="r",
            branch="develop",
            good_commit="1" * 40,
            bad_commit="3" * 40,
            question=question.model_dump(mode="json"),
            commits=["2" * 40, "3" * 40],
            state=bisection_runs.RUNNING,
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
