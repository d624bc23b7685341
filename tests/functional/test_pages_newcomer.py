"""The pages as a newcomer meets them, in a real headless Chromium against a real service on
127.0.0.1: the API page with no network beyond the service, the grid in a 1400 px window, builds
of one version told apart, the favicon, an empty trends page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy.orm import Session

from core.wire import Stage, StageResult, Status
from service.db import make_engine
from service.models import Build, Job, StageRow
from service.results.assemble import stage_document
from testkit import loopback
from testkit.dashboard_data import seed_all
from testkit.service import Service, service_env


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("pages") / "data"
    svc = Service(data_dir=data, env=service_env(data)).start()
    engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
    try:
        seed_all(engine)
    finally:
        engine.dispose()
    yield svc
    svc.stop()


@pytest.fixture
def offline_page(browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A 1400 px page whose every request to anything but 127.0.0.1 is refused (and recorded)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    blocked: list[str] = []

    def only_local(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", only_local)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page, blocked
    context.close()


def test_the_api_page_renders_with_no_network_beyond_the_service(seeded, offline_page) -> None:  # type: ignore[no-untyped-def]
    page, blocked = offline_page
    page.goto(f"{seeded.url}/docs")
    page.wait_for_selector(".opblock", state="attached")
    paths = page.eval_on_selector_all(
        ".opblock .opblock-summary-path", "els => els.map(e => e.textContent.trim())"
    )
    assert "/validate" in paths and "/api/builds/{build_id}" in paths, paths
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("fe-ci")
    assert blocked == [], blocked
    # the assets are the pinned copy, with its licence beside it
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "LICENSE"):
        assert loopback.get(f"{seeded.url}/static/swagger-ui/{asset}").status_code == 200
    assert loopback.get(f"{seeded.url}/redoc").status_code == 404
    # and a way back to the dashboard
    page.click("#back-to-dashboard a[href='/']")
    page.wait_for_selector("#builds")
    assert urlsplit(page.url).path == "/"


def test_the_grid_fits_a_1400px_window_under_its_header(seeded, offline_page) -> None:  # type: ignore[no-untyped-def]
    page, blocked = offline_page
    page.goto(f"{seeded.url}/")
    got = page.evaluate(
        """() => {
            const grid = document.querySelector('#builds').getBoundingClientRect();
            const header = document.querySelector('header').getBoundingClientRect();
            const box = document.querySelector('#builds').parentElement;
            return {page: document.documentElement.scrollWidth, window: innerWidth,
                    gridRight: grid.right, headerRight: header.right,
                    boxScroll: box.scrollWidth, boxWidth: box.clientWidth};
        }"""
    )
    assert got["page"] <= got["window"], got  # no sideways scrolling of the page
    assert got["gridRight"] <= got["headerRight"], got  # the header spans the grid
    assert got["boxScroll"] <= got["boxWidth"], got  # and the grid needs no scrolling at 1400 px
    assert blocked == []


def test_builds_of_one_version_are_told_apart(seeded, offline_page) -> None:  # type: ignore[no-untyped-def]
    page, _ = offline_page
    items = loopback.get(f"{seeded.url}/api/builds?limit=100").json()["items"]
    wheels = [b for b in items if b["source"] == "wheel" and b["version"] == "1.32.0"]
    assert len(wheels) > 2
    page.goto(f"{seeded.url}/")
    shown = {}
    for b in wheels:
        sha = loopback.get(f"{seeded.url}/api/builds/{b['id']}").json()["sha256"]
        text = page.locator(f"#build-{b['id']} td.source code.sha").inner_text()
        assert sha.startswith(text) and len(text) >= 8, (b["id"], text, sha)
        shown[b["id"]] = text
    assert len(set(shown.values())) > 1, shown
    first = wheels[0]["id"]
    page.goto(f"{seeded.url}/builds/{first}")
    assert page.locator("#build-ident").inner_text() == shown[first]


def test_favicon_is_served_and_linked(seeded) -> None:  # type: ignore[no-untyped-def]
    resp = loopback.get(f"{seeded.url}/favicon.ico")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("image/")
    assert resp.content[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert '<link rel="icon" href="/favicon.ico">' in loopback.get(f"{seeded.url}/").text


def test_an_empty_trends_page_says_drift_needs_a_gpu_runner(service: Service, browser) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{service.url}/trends")
        text = page.locator("main").inner_text()
        assert "newest 0" not in text, text
        empty = page.locator("#trends-empty").inner_text()
        assert "GPU runner" in empty and "sm_90" in empty, empty
        assert page.locator("#trend-durations").count() == 0  # no stage has run either
    finally:
        page.close()


def test_trends_without_drift_draw_the_newest_builds_stage_times(service: Service, browser) -> None:  # type: ignore[no-untyped-def]
    """Three CPU-only builds (install, probe, refusal; no determinism run, so no drift): the
    stage durations are drawn across them, one point per build and stage."""
    engine = make_engine(f"sqlite:///{service.data_dir / 'fe-ci.sqlite3'}")
    with Session(engine) as session:
        for n in range(3):
            at = datetime(2026, 11, 20 + n, 9, tzinfo=UTC)
            build = Build(source="wheel", version=f"1.3{n}.0", created_at=at, finished_at=at)
            job = Job(kind="cpu", state="finished", build=build)
            session.add_all([build, job])
            session.flush()
            for stage, seconds in (("install", 10.0 + n), ("probe", 2.0), ("refusal", 3.0)):
                result = StageResult(name=Stage(stage), status=Status.pass_, duration_s=seconds)
                session.add(
                    StageRow(
                        job_id=job.id,
                        name=stage,
                        status="pass",
                        duration_s=seconds,
                        result=stage_document(result),
                    )
                )
        session.commit()
    engine.dispose()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{service.url}/trends")
        assert page.locator("#trends-empty").is_visible()  # still: no drift measured
        section = page.locator("#trend-durations")
        assert "since none measured drift" in section.inner_text()
        captions = section.locator("figcaption").all_inner_texts()
        assert captions == ["install (s)", "probe (s)", "refusal (s)"], captions
        points = section.locator("figure").first.locator("circle title").all_text_contents()
        assert len(points) == 3 and all(p.endswith(" s") for p in points), points
        assert "1.30.0" in section.inner_text() and "1.32.0" in section.inner_text()
    finally:
        page.close()
