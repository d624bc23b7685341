"""The pages in a real headless Chromium against a real service (uvicorn on 127.0.0.1): no page
scrolls sideways at phone width (360 px); the build page's controls send the submit token only
in a header; the trends axis and its one-line empty subjects; the bisection page as git bisect.

The seeded database (testkit/dashboard_data) stands in for runners this machine cannot have.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.db import make_engine
from service.models import Build, Job, StoredDriftRow
from testkit import loopback
from testkit.dashboard_data.extras import COMMITS, seed_bisection, seed_logs
from testkit.service import SUBMIT, Service
from testkit.wheels import make_wheel
from tests.helpers import seeded_service, submit_wheel

PHONE = {"width": 360, "height": 780}


def _bisection_and_logs(engine: Any, ids: dict[str, int]) -> None:
    ids["bisection"] = seed_bisection(engine, ids["pass"], ids["fail"])
    seed_logs(engine, ids["fail"])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, int]]]:
    with seeded_service(tmp_path_factory.mktemp("phone") / "data", _bisection_and_logs) as seeded:
        yield seeded


def test_no_page_scrolls_sideways_at_360px(seeded: Any, browser: Any) -> None:
    svc, ids = seeded
    pages = [
        "/",
        f"/builds/{ids['fail']}",
        f"/builds/{ids['running']}",
        "/trends",
        "/runners",
        f"/bisections/{ids['bisection']}",
        f"/compare?a={ids['pass']}&b={ids['fail']}",
    ]
    page = browser.new_page(viewport=PHONE)
    try:
        for path in pages:
            assert page.goto(svc.url + path).status == 200, path
            page.eval_on_selector_all("details", "ds => ds.forEach(d => { d.open = true; })")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 360, (path, width)
    finally:
        page.close()


def test_the_controls_send_the_token_only_in_a_header(
    service: Service, browser: Any, tmp_path: Path
) -> None:
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.30.0", ""))
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sent: list[dict[str, Any]] = []
    page.on(
        "request", lambda r: sent.append({"url": r.url, "method": r.method, "headers": r.headers})
    )
    try:
        page.goto(f"{service.url}/builds/{build_id}")
        assert SUBMIT not in page.content()
        assert page.locator(".control-token").get_attribute("type") == "password"
        page.fill(".control-token", "not-the-token")
        page.click("#cancel-build")
        page.wait_for_selector(".control-result:has-text('unauthorized')")
        assert page.input_value(".control-token") == ""  # a refused token is not kept
        page.fill(".control-token", SUBMIT)
        page.click("#cancel-build")
        page.wait_for_selector("#rerun-build")  # reloaded: cancelled, so it can be rerun
        assert loopback.get(f"{service.url}/api/builds/{build_id}").json()["status"] == "cancelled"
        page.fill(".control-token", SUBMIT)
        page.click("#rerun-build")
        page.wait_for_url(f"**/builds/{build_id + 1}")
        storage = page.evaluate("[localStorage.length, sessionStorage.length, document.cookie]")
        assert storage == [0, 0, ""] and context.cookies() == []
    finally:
        context.close()
    posts = [r for r in sent if r["method"] == "POST"]
    assert [r["url"].removeprefix(service.url) for r in posts] == [
        f"/api/builds/{build_id}/cancel",
        f"/api/builds/{build_id}/cancel",
        f"/api/builds/{build_id}/rerun",
    ]
    assert [r["headers"].get("authorization") for r in posts[1:]] == [f"Bearer {SUBMIT}"] * 2
    assert not any(SUBMIT in r["url"] for r in sent)
    assert loopback.get(f"{service.url}/api/builds/{build_id + 1}").json()["status"] == "queued"


def test_trends_name_builds_on_the_axis_and_fold_subjects_that_never_ran(
    service: Service, browser: Any
) -> None:
    engine = make_engine(f"sqlite:///{service.data_dir / 'fe-ci.sqlite3'}")
    with Session(engine) as session:
        for n, version in enumerate(("1.31.0", "1.32.0")):
            at = datetime(2026, 11, 20 + n, 9, tzinfo=UTC)
            build = Build(source="wheel", version=version, created_at=at, finished_at=at)
            job = Job(kind="gpu", family="sm_90", state="finished", build=build)
            session.add_all([build, job])
            session.flush()
            session.add(
                StoredDriftRow(
                    build_id=build.id,
                    job_id=job.id,
                    family="sm_90",
                    subject="sdpa_bwd",
                    output="dq",
                    arm="control",
                    runs=16,
                    differing=6 + n,
                    distinct=3,
                    max_abs_diff=1e-3,
                    finite=True,
                    config={},
                )
            )
        session.commit()
    engine.dispose()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{service.url}/trends")
        ticks = page.eval_on_selector_all(
            "#trend-sdpa_bwd svg text.tick", "ts => ts.map(t => t.textContent)"
        )
        assert "1.31.0Nov 20" in ticks and "1.32.0Nov 21" in ticks, ticks
        for never in ("grouped_gemm_dsrelu", "grouped_gemm_dglu", "flex_attention_bwd"):
            folded = page.locator(f"p.trend-empty#trend-{never}")
            assert "no determinism run" in folded.inner_text()
            assert folded.bounding_box()["height"] < 40  # one line
        assert page.locator("section#trend-sdpa_bwd svg").count() == 3
    finally:
        page.close()


def test_the_bisection_page_reads_as_git_bisect(seeded: Any, browser: Any) -> None:
    svc, ids = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/bisections/{ids['bisection']}")
        title = page.locator("#bisection-title").inner_text()
        assert title.startswith(
            "git bisect develop: the first commit where feature_regression on "
            "grouped_gemm_dsrelu is reported"
        ), title
        assert page.title().startswith("git bisect develop")
        rows = page.eval_on_selector_all(
            "#steps tbody tr", "rs => rs.map(r => [r.dataset.mark, r.cells[0].textContent])"
        )
        order = [COMMITS[0], COMMITS[1], COMMITS[2], COMMITS[3], COMMITS[-1]]
        assert rows == [
            [m, c[:12]] for m, c in zip(["good", "good", "bad", "bad", "bad"], order, strict=True)
        ]
        text = page.locator("main").inner_text()
        assert "present" not in text and "absent" not in text and "Bisection 1" not in text
    finally:
        page.close()
