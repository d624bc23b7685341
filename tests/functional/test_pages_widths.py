"""Every page at a phone's width (360 px) and a laptop's (1280 px), in a real headless Chromium
against a real service on 127.0.0.1, over twenty builds of twenty different wheels (versions, file
names and verdict reasons all differ): no element's content is wider than its box, so nothing is
cut and nothing scrolls sideways; what tells the builds apart is on screen.

The seeded database (testkit/dashboard_data) stands in for runners this machine cannot have. The
screenshots go to the test's temp dir; ``bench/page_shots.py --seed`` regenerates the committed
ones (docs/screenshots/).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.db import make_engine
from testkit import loopback
from testkit.dashboard_data import seed_all
from testkit.dashboard_data.extras import seed_bisection, seed_logs, vary_wheels
from testkit.service import Service, service_env
from tests.helpers import seeded_service, unfold

WIDTHS = (360, 1280)
TOLERANCE_PX = 1  # sub-pixel rounding
BY_VERDICT = {"pass": "success", "incomplete": "neutral", "pending": "pending", "fail": "failure"}
# Every HTML element in the page whose content is wider than its box (scrollWidth past
# clientWidth), with what it holds; an inline element has no box of its own (clientWidth 0). On
# /docs the inside of the vendored Swagger UI (its icons are 2 px wider than their boxes by its
# own stylesheet) is left out; the page's width and its way back to the dashboard are checked.
OVERFLOWING = """() => [...document.body.querySelectorAll('*')]
    .filter(e => e instanceof HTMLElement && e.clientWidth > 0 && !e.closest('.swagger-ui')
                 && e.scrollWidth > e.clientWidth + TOLERANCE)
    .map(e => [e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
               + (e.className ? '.' + String(e.className).split(' ').join('.') : ''),
               e.scrollWidth, e.clientWidth, (e.innerText || '').slice(0, 60)])"""
OVERFLOWING = OVERFLOWING.replace("TOLERANCE", str(TOLERANCE_PX))


def _more(engine: Any, ids: dict[str, int]) -> None:
    ids["bisection"] = seed_bisection(engine, ids["pass"], ids["fail"])
    seed_logs(engine, ids["fail"])
    ids["wheels"] = len(vary_wheels(engine, ids))


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, int]]]:
    data = tmp_path_factory.mktemp("widths") / "data"
    with seeded_service(data, _more, history=9) as seeded:
        yield seeded


def _pages(ids: dict[str, int]) -> list[str]:
    builds = ("fail", "waiting", "incomplete", "not_applicable", "cancelled", "running", "xss")
    return [
        "/",
        *(f"/builds/{ids[name]}" for name in builds),
        "/trends",
        "/runners",
        f"/bisections/{ids['bisection']}",
        f"/compare?a={ids['pass']}&b={ids['fail']}",
        "/docs",
        f"/api/builds/{ids['fail']}/logs",  # text, as the browser shows it
        "/api/pins",
        "/builds/999999",  # the 404 page
    ]


def test_twenty_builds_of_different_wheels_are_seeded(seeded: Any) -> None:
    svc, ids = seeded
    items = loopback.get(f"{svc.url}/api/builds?limit=100").json()["items"]
    wheels = [b for b in items if b["source"] == "wheel"]
    assert ids["wheels"] == len(wheels) >= 20
    assert len({b["filename"] for b in wheels}) == len(wheels)
    assert len({b["version"] for b in wheels}) == len(wheels)
    assert len({b["verdict"] for b in items}) >= 6


@pytest.mark.parametrize("width", WIDTHS)
def test_no_element_is_wider_than_its_box(
    seeded: Any, browser: Any, width: int, tmp_path: Path
) -> None:
    svc, ids = seeded
    page = browser.new_page(viewport={"width": width, "height": 900})
    found = {}
    try:
        for path in _pages(ids):
            status = page.goto(svc.url + path).status
            assert status == (404 if path == "/builds/999999" else 200), path
            if path == "/docs":
                page.wait_for_selector(".opblock", state="attached")
            unfold(page)
            found[path] = page.evaluate(OVERFLOWING)
            assert page.evaluate("document.documentElement.scrollWidth") <= width, path
            name = path.strip("/").replace("/", "-").split("?")[0] or "grid"
            page.screenshot(path=str(tmp_path / f"{width}-{name}.png"), full_page=True)
    finally:
        page.close()
    for path, wide in found.items():
        assert wide == [], (path, wide)


def test_the_grid_at_1280px_shows_what_tells_builds_apart(seeded: Any, browser: Any) -> None:
    """The varying part of each wheel's name (its shared start and end elided), every verdict
    reason whole, and each build's gate as the report has it."""
    svc, _ = seeded
    items = loopback.get(f"{svc.url}/api/builds?limit=100").json()["items"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(svc.url + "/")
        for b in items:
            row = page.locator(f"#build-{b['id']}")
            if b["source"] == "wheel":
                shown = row.locator(".filename").inner_text()
                assert b["version"] in shown and shown.startswith("…"), (b["filename"], shown)
                assert not shown.startswith("…nvidia_cudnn_frontend"), shown
                assert row.locator(".filename").get_attribute("title") == b["filename"]
            report = loopback.get(f"{svc.url}/api/builds/{b['id']}").json()
            why = row.locator("td.verdict .why")
            if why.count():
                assert why.inner_text() == report["verdict_reason"]  # whole, wrapped
            gate = row.locator("td.gate .st")
            assert gate.inner_text() == report["gate"]["conclusion"], b["id"]
    finally:
        page.close()


def test_a_neutral_gate_says_what_neutral_means_and_why(seeded: Any, browser: Any) -> None:
    svc, ids = seeded
    report = loopback.get(f"{svc.url}/api/builds/{ids['incomplete']}").json()
    assert report["gate"]["conclusion"] == "neutral"
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{svc.url}/builds/{ids['incomplete']}")
        text = page.locator("#gate-neutral").inner_text()
        assert "did not run" in text and "neither passes nor fails" in text, text
        assert "sm_100" in text, text  # why: the family no runner took
        assert page.locator("#gate-neutral").is_visible()  # on the first screen
        page.goto(f"{svc.url}/builds/{ids['pass']}")
        assert page.locator("#gate-neutral").count() == 0
    finally:
        page.close()


def test_provenance_labels_never_break_inside_a_word(seeded: Any, browser: Any) -> None:
    svc, ids = seeded
    page = browser.new_page(viewport={"width": 360, "height": 800})
    try:
        page.goto(f"{svc.url}/builds/{ids['fail']}")
        unfold(page)
        heights = page.eval_on_selector_all(
            "#provenance-table th",
            """ths => ths.map(th => {
                const r = document.createRange(); r.selectNodeContents(th);
                return [th.innerText, r.getClientRects().length];
            })""",
        )
        assert heights and all(lines == 1 for _, lines in heights), heights
    finally:
        page.close()


def test_the_grid_gate_follows_the_required_checks(
    tmp_path_factory: pytest.TempPathFactory, browser: Any
) -> None:
    """Under ``FE_CI_REQUIRE=sm_90`` a build's gate is not its verdict's: the grid's gate column
    says what each report's gate says, for reports stored under other required checks too (the
    seeding judged them under ``all``)."""
    data = tmp_path_factory.mktemp("require") / "data"
    svc = Service(data_dir=data, env=service_env(data, FE_CI_REQUIRE="sm_90")).start()
    try:
        engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
        try:
            ids = seed_all(engine, history=0)
        finally:
            engine.dispose()
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        try:
            page.goto(svc.url + "/")
            shown = {
                name: page.locator(f"#build-{ids[name]} td.gate .st").inner_text()
                for name in ("incomplete", "pass", "fail", "running")
            }
            assert shown["fail"] == "failure" and shown["running"] == "pending", shown
            differ = 0
            for name in ("incomplete", "pass", "fail"):
                report = loopback.get(f"{svc.url}/api/builds/{ids[name]}").json()
                assert report["gate"]["require"] == ["sm_90"]
                assert shown[name] == report["gate"]["conclusion"], (name, report["gate"])
                differ += shown[name] != BY_VERDICT[report["verdict"]]
            assert differ, shown  # the column is the required checks' gate, not the verdict's
            page.reload()  # now from the stored reports, by their gate alone
            again = page.locator(f"#build-{ids['incomplete']} td.gate .st").inner_text()
            assert again == shown["incomplete"]
        finally:
            page.close()
    finally:
        svc.stop()


# Each chart's tick labels: inside the chart's own width, and none over its neighbour on a line.
TICKS_OUT = """() => { const bad = [];
  for (const svg of document.querySelectorAll('svg')) {
    const width = svg.viewBox.baseVal.width, lines = {};
    for (const t of svg.querySelectorAll('text.tick')) {
      const b = t.getBBox();
      if (b.x < 0 || b.x + b.width > width) bad.push([svg.ariaLabel, t.textContent, 'outside']);
      (lines[Math.round(b.y)] = lines[Math.round(b.y)] || []).push([b.x, b.x + b.width, t]);
    }
    for (const line of Object.values(lines)) {
      line.sort((a, b) => a[0] - b[0]);
      for (let i = 1; i < line.length; i++)
        if (line[i][0] < line[i - 1][1]) bad.push([svg.ariaLabel, line[i][2].textContent, 'over']);
    }
  } return bad; }"""


def test_the_trends_axes_name_long_versions_without_overlap(seeded: Any, browser: Any) -> None:
    """Twenty dev versions on the axis: each tick says its release, inside its chart, apart from
    its neighbours (the whole version is in the builds table)."""
    svc, _ = seeded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{svc.url}/trends")
        ticks = page.eval_on_selector_all("svg text.tick", "ts => ts.map(t => t.textContent)")
        assert any(".dev" not in t and "…" in t for t in ticks), ticks[:20]
        assert page.evaluate(TICKS_OUT) == []
    finally:
        page.close()
