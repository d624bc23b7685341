"""One state, one word: a job waiting for a runner, pending, running, skipped or cancelled, and a
rerun, read alike on the grid, the build page and the API, in a real headless Chromium against a
real service on 127.0.0.1 (``core.wire.job_word`` is the one mapping all three use).

The seeded database (testkit/dashboard_data) stands in for runners this machine cannot have
(an sm_100 runner last seen two days ago, an H200 that is alive).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from testkit import loopback
from testkit.service import SUBMIT, Service
from testkit.wheels import make_wheel
from tests.helpers import seeded_service, submit_wheel, unfold

# What each seeded build's jobs are, in the words a reader should see: (kind, family) -> word.
EXPECTED = {
    "waiting": {("cpu", None): "finished", ("gpu", "sm_100"): "waiting"},  # no sm_100 alive
    "pending": {("cpu", None): "pending"},  # queued, a CPU runner alive
    "commit_building": {("build", None): "running", ("cpu", None): "pending"},  # wheel first
    "incomplete": {
        ("cpu", None): "finished",
        ("gpu", "sm_90"): "finished",
        ("gpu", "sm_100"): "skipped",
    },
    "cancelled": {("cpu", None): "cancelled", ("gpu", "sm_90"): "cancelled"},
    "running": {("cpu", None): "running", ("gpu", "sm_90"): "running"},
}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, int]]]:
    """The seeded scenarios (their leases held for the module's length), and a real wheel
    submitted, cancelled and rerun (a seeded build has no stored wheel to rerun)."""
    data = tmp_path_factory.mktemp("words") / "data"
    with seeded_service(data, lease=timedelta(hours=2)) as (svc, ids):
        wheel = make_wheel(tmp_path_factory.mktemp("wheel"), "1.32.0", "")
        ids["rerun_of"] = submit_wheel(svc, wheel)
        auth = {"Authorization": f"Bearer {SUBMIT}"}
        for action in ("cancel", "rerun"):
            resp = loopback.post(f"{svc.url}/api/builds/{ids['rerun_of']}/{action}", headers=auth)
            assert resp.status_code in (200, 202), resp.text
        ids["rerun"] = resp.json()["build_id"]
        yield svc, ids


def _report(svc: Service, build_id: int) -> dict[str, Any]:
    return loopback.get(f"{svc.url}/api/builds/{build_id}").json()


def _words_on_the_build_page(page: Any, job_id: int) -> tuple[str, str]:
    progress = page.locator(f"#live-jobs li[data-job='{job_id}'] > .st").get_attribute("data-state")
    table = page.locator(f"#jobs-table tr[data-job='{job_id}'] .st").first.get_attribute(
        "data-state"
    )
    return progress, table


@pytest.mark.parametrize("name", [*EXPECTED, "rerun"])
def test_a_job_state_reads_as_one_word_on_the_grid_the_build_page_and_the_api(
    seeded: Any, browser: Any, name: str
) -> None:
    svc, ids = seeded
    build_id = ids[name]
    report = _report(svc, build_id)
    words = {(j["kind"], j["family"]): j["shown"] for j in report["jobs"]}
    if name == "rerun":  # a new build of the same wheel: its jobs queued for alive runners
        assert set(words.values()) == {"pending"}, words
    else:
        assert words == EXPECTED[name]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/builds/{build_id}")
        unfold(page)
        for job in report["jobs"]:
            assert _words_on_the_build_page(page, job["id"]) == (job["shown"], job["shown"]), job
        page.goto(f"{svc.url}/")
        row = page.locator(f"#build-{build_id}")
        shown = set(row.locator("td.stage .st").evaluate_all("es => es.map(e => e.dataset.state)"))
        for word in words.values():
            if word != "finished":  # a finished job's stages show what each reported
                assert word in shown, (word, shown)
        if name != "incomplete":  # nothing was skipped: no column says so
            assert "skipped" not in shown, shown
    finally:
        page.close()


def test_a_waiting_build_is_pending_everywhere_never_skipped(seeded: Any, browser: Any) -> None:
    """Queued with no GPU job: the subjects and determinism are pending on the grid as in the
    report (a subject still to run has not been skipped)."""
    svc, ids = seeded
    report = _report(svc, ids["pending"])
    assert report["verdict"] == "pending"
    assert [n for n in report["not_run"] if n["status"] == "skipped"] == []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/")
        row = page.locator(f"#build-{ids['pending']}")
        for stage in ("determinism", "numerics"):
            assert row.locator(f"td[data-stage={stage}] .st").get_attribute("data-state") == (
                "pending"
            )
        subjects = row.locator("td.subject .st").evaluate_all("es => es.map(e => e.dataset.state)")
        assert subjects and set(subjects) == {"pending"}, subjects
        assert row.locator("td.gate .st").inner_text() == report["gate"]["conclusion"] == "pending"
    finally:
        page.close()


def test_a_cancelled_build_says_so_where_its_logs_would_be(seeded: Any, browser: Any) -> None:
    svc, ids = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/builds/{ids['cancelled']}")
        unfold(page)
        logs = page.locator("#logs-section").inner_text()
        assert "No stage has reported yet" not in logs and "cancelled" in logs, logs
        stages = page.locator("#stages").inner_text()
        assert "cancelled before any stage reported" in stages, stages
    finally:
        page.close()


def test_a_rerun_is_marked_on_the_grid_the_build_page_and_the_api(
    seeded: Any, browser: Any
) -> None:
    svc, ids = seeded
    original, rerun = ids["rerun_of"], ids["rerun"]
    assert _report(svc, rerun)["rerun_of"] == original
    assert _report(svc, original)["rerun_of"] is None
    items = loopback.get(f"{svc.url}/api/builds?limit=100").json()["items"]
    assert {b["id"]: b["rerun_of"] for b in items}[rerun] == original
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/")
        mark = page.locator(f"#build-{rerun} td.id .rerun")
        assert mark.inner_text() == f"rerun of {original}"
        assert mark.locator("a").get_attribute("href") == f"/builds/{original}"
        assert page.locator(f"#build-{original} td.id .rerun").count() == 0
        page.goto(f"{svc.url}/builds/{rerun}")
        assert f"build {original}" in page.locator("#rerun-of").inner_text()
    finally:
        page.close()
