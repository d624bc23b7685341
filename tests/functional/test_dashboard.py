"""The dashboard in a real headless Chromium against a real service (uvicorn on 127.0.0.1).

The seeded database holds builds in every state (testkit/dashboard_data/scenarios.py; the GPU
results there, an sm_100 job among them, stand in for runners this machine cannot have); a running
build followed live is tests/functional/test_live_status.py. With ``FE_CI_SCREENSHOTS=1`` the tests
also retake the four screenshots in docs/screenshots/; otherwise they write nothing into the tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from testkit import loopback
from testkit.dashboard_data import XSS_BRANCH, XSS_VERSION
from testkit.service import ROOT, Service
from tests.helpers import CHROMIUM, seeded_service, unfold

SHOTS = ROOT / "docs" / "screenshots"
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup does)",
)
# Every state and verdict (docs/architecture.md), with the text its cell must show.
STATE_TEXT = {
    "pending": "pending",
    "running": "running",
    "waiting": "waiting for an sm_100 runner",
    "pass": "pass",
    "fail": "fail",
    "inconclusive": "inconclusive",
    "incomplete": "incomplete",
    "skipped": "skipped",
    "not_applicable": "not applicable",
    "error": "error",
    "timeout": "timeout",
    "crashed": "crashed",
    "cancelled": "cancelled",
}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, dict[str, int]]]:
    with seeded_service(tmp_path_factory.mktemp("dash") / "data") as seeded:
        yield seeded


def shot(page: Any, name: str) -> None:
    """Retake docs/screenshots/<name>.png, only when asked: tests leave tracked files alone."""
    if os.environ.get("FE_CI_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def cells(page: Any, selector: str) -> list[dict[str, str]]:
    return page.eval_on_selector_all(
        selector,
        """els => els.map(e => {
            const cs = getComputedStyle(e);
            return {state: e.dataset.state, text: e.textContent.trim(), title: e.title,
                    look: cs.backgroundColor + '|' + cs.color + '|' + cs.borderTopStyle
                          + '|' + cs.borderTopColor};
        })""",
    )


@needs_chromium
def test_grid_renders_every_state_with_its_text_and_colour(seeded, page) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    page.goto(svc.url + "/")
    found = cells(page, "#builds tbody .st")
    by_state: dict[str, list[dict[str, str]]] = {}
    for c in found:
        by_state.setdefault(c["state"], []).append(c)
    for state, text in STATE_TEXT.items():
        assert state in by_state, f"no {state} cell in the grid"
        assert any(c["text"] == text for c in by_state[state]), (state, by_state[state][:3])
    # skipped and not_applicable always say why on hover
    for state in ("skipped", "not_applicable"):
        assert all(c["title"].strip() for c in by_state[state]), state
    # colour as well as text: no two states look alike
    looks = {state: by_state[state][0]["look"] for state in STATE_TEXT}
    assert len(set(looks.values())) == len(looks), looks
    # the rows are newest first and carry version, source and when
    row_ids = [
        int(i)
        for i in page.eval_on_selector_all(
            "#builds tbody tr", "r => r.map(e => e.id.split('-')[1])"
        )
    ]
    assert row_ids == sorted(row_ids, reverse=True) and len(row_ids) == len(ids)
    fail_row = page.locator(f"#build-{ids['fail']}")
    assert "1.29.0" in fail_row.locator(".version").inner_text()
    assert "develop" in fail_row.locator(".source").inner_text()
    # findings stand out by severity: an error finding marks the row and shows a red badge
    assert "row-sev-error" in (fail_row.get_attribute("class") or "")
    badge = fail_row.locator(".findings .sev-error")
    assert badge.inner_text() == "1 error"
    assert "feature_regression" in (badge.get_attribute("title") or "")
    edge = page.eval_on_selector(f"#build-{ids['fail']} td", "e => getComputedStyle(e).boxShadow")
    assert edge != "none"
    # the waiting GPU job shows in the subject column of a grouped-GEMM subject
    waiting = page.locator(f"#build-{ids['waiting']} td[data-subject=grouped_gemm_dsrelu] .st")
    assert waiting.inner_text() == "waiting for an sm_100 runner"
    shot(page, "grid")


@needs_chromium
def test_grid_filters_and_pages_by_cursor(seeded, page) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    page.goto(svc.url + "/")
    page.select_option("select[name=verdict]", "fail")
    page.click("button[type=submit]")
    page.wait_for_url("**verdict=fail**")
    verdicts = page.eval_on_selector_all(
        "#builds tbody td.verdict .st", "els => els.map(e => e.dataset.state)"
    )
    assert verdicts and set(verdicts) == {"fail"}
    page.goto(svc.url + "/?source=commit&branch=refs/heads/develop")
    sources = page.eval_on_selector_all(
        "#builds tbody td.source", "els => els.map(e => e.innerText)"
    )
    assert sources and all(s.startswith("commit") and "develop" in s for s in sources)
    # cursor paging: five at a time, the filters ride along, every build exactly once
    page.goto(svc.url + "/?limit=5")
    seen: list[int] = []
    while True:
        seen += [
            int(i)
            for i in page.eval_on_selector_all(
                "#builds tbody tr", "r => r.map(e => e.id.split('-')[1])"
            )
        ]
        older = page.locator("a[rel=next]")
        if older.count() == 0:
            break
        assert "limit=5" in (older.get_attribute("href") or "")
        older.click()
        page.wait_for_load_state()
    assert seen == sorted(ids.values(), reverse=True)


@needs_chromium
def test_build_page_shows_drift_refusal_and_provenance(seeded, page) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    page.goto(f"{svc.url}/builds/{ids['pass']}")
    shot(page, "build")  # as a reader first sees it: cause first, the rest folded
    unfold(page)
    heads = page.eval_on_selector_all("#drift thead th", "els => els.map(e => e.innerText)")
    for col in (
        "runs",
        "differing",
        "distinct",
        "max |d|",
        "luck probability",
        "stopped by",
        "config",
    ):
        assert col in heads
    report = loopback.get(f"{svc.url}/api/builds/{ids['pass']}").json()
    drift_rows = page.locator("#drift tbody tr")
    assert drift_rows.count() == len(report["drift"]) == 18
    first = drift_rows.first.inner_text()
    assert "sdpa_bwd" in first and "luck_target" in page.locator("#drift").inner_text()
    assert "b4_h16_s2048_causal" in page.locator("#drift").inner_text()
    # the refusal matrix: activation x request rows by scale bias x FC1 bias x unit scale
    cells_ = page.locator("table.refusal tbody td.cell")
    assert cells_.count() == 80 == len(report["refusal"])
    assert page.locator("table.refusal tbody tr").count() == 10
    heads = page.locator("table.refusal thead").inner_text()
    for col in (
        "scale bias off",
        "scale bias on",
        "FC1 bias on",
        "unit scale off",
        "unit scale on",
    ):
        assert col in heads
    got = page.eval_on_selector_all(
        "table.refusal tbody tr",
        """rows => rows.flatMap(tr => {
            const [a, q] = [...tr.querySelectorAll('th')].map(th => th.innerText);
            return [...tr.querySelectorAll('td.cell')].map((td, i) =>
                [a, q, !!(i & 4), !!(i & 2), !!(i & 1), td.dataset.expected, td.dataset.observed]);
        })""",
    )
    want = [
        [
            r["activation"],
            r["request"],
            r["scale_bias"],
            r["fc1_bias"],
            r["unit_scale"],
            r["expected"],
            r["observed"],
        ]
        for r in report["refusal"]
    ]
    assert sorted(got) == sorted(want)
    text = page.locator("main").inner_text()
    for needle in ("NVIDIA H200", "NVIDIA B200", "netns,uid", "2.13.0+cu130", "9.14.0", "4.8.1"):
        assert needle in text, needle
    caps = page.locator("#capabilities").inner_text()
    assert "docstring" in caps and "signature" in caps
    assert "default_ignores_torch_flag" in text
    assert page.locator("a[href$='/junit.xml']").count() == 1
    assert page.locator(f"a[href='/api/builds/{ids['pass']}']").count() == 1
    # a failing build's refusal rows that broke the contract read as fail
    page.goto(f"{svc.url}/builds/{ids['fail']}")
    mismatches = page.locator("table.refusal td.mismatch")
    assert mismatches.count() == 2
    assert "observed passed_false" in mismatches.first.inner_text()
    assert mismatches.first.locator(".st").get_attribute("data-state") == "fail"


def test_junit_xml_has_a_testcase_per_check_with_statuses_mapped(seeded) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    for name, check, tag in (
        ("fail", "flex_attention_bwd.deterministic", "failure"),
        ("timeout", "flex_attention_bwd.deterministic", "error"),
        ("pass", "grouped_gemm_dsrelu.deterministic", "skipped"),
    ):
        resp = loopback.get(f"{svc.url}/builds/{ids[name]}/junit.xml")
        assert resp.status_code == 200 and "junit" in resp.headers["content-disposition"]
        root = ET.fromstring(resp.content)
        report = loopback.get(f"{svc.url}/api/builds/{ids[name]}").json()
        n_checks = (
            sum(max(1, len(s["checks"])) for j in report["jobs"] for s in j["stages"])
            + sum(f["severity"] == "error" for f in report["findings"])
            + len(report["not_run"])
        )
        assert int(root.get("tests", "0")) == n_checks == len(root.findall(".//testcase"))
        cases = [c for c in root.iter("testcase") if c.get("name") == check]
        assert cases and any(c.find(tag) is not None for c in cases), (name, check, tag)
    root = ET.fromstring(loopback.get(f"{svc.url}/builds/{ids['timeout']}/junit.xml").content)
    assert any(e.get("type") == "timeout" for e in root.iter("error"))
    root = ET.fromstring(loopback.get(f"{svc.url}/builds/{ids['fail']}/junit.xml").content)
    assert int(root.get("failures", "0")) >= 3  # the check, the refusal check, the finding


@needs_chromium
def test_script_in_a_version_is_shown_as_text(seeded, page) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(svc.url + "/")
    row = page.locator(f"#build-{ids['xss']}")
    assert row.locator(".version").inner_text() == XSS_VERSION
    assert XSS_BRANCH.removeprefix("refs/heads/") in row.locator(".source").inner_text()
    assert "<i>evil</i>.whl" in row.locator(".source").inner_text()
    page.goto(f"{svc.url}/builds/{ids['xss']}")
    assert page.locator("#build-version").inner_text() == XSS_VERSION
    unfold(page)
    text = page.locator("main").inner_text()
    assert '<img src=x onerror="window.__xss = 2">' in text
    assert "<script>window.__xss = 3</script> claims a knob it lacks" in text
    assert page.evaluate("window.__xss") is None and not dialogs
    assert page.locator("main script, main img, main b, main i").count() == 0


@needs_chromium
def test_trends_are_svg_charts_readable_without_javascript(seeded, browser) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1500, "height": 900}
    )
    page = context.new_page()
    try:
        page.goto(svc.url + "/trends")
        sdpa = page.locator("#trend-sdpa_bwd")
        # the control arm's share per build, one point per build that measured sdpa_bwd on sm_90
        points = sdpa.locator("figure").first.locator("circle")
        report_ids = [i for n, i in ids.items() if n.startswith("history") or n == "pass"]
        assert points.count() >= len(report_ids)
        titles = sdpa.locator("figure").first.locator("circle title").all_text_contents()
        assert any("0 of 16 runs differ" in t for t in titles)  # the inconclusive build
        # the deterministic arm's verdict per build, as marks with a letter
        letters = sdpa.locator("g.mark text").all_text_contents()
        assert "P" in letters and "I" in letters
        flex = page.locator("#trend-flex_attention_bwd g.mark.m-fail")
        assert flex.count() >= 1
        durations = page.locator("#trend-durations polyline")
        assert durations.count() == 6  # one chart per stage, build included
        shot(page, "trends")
    finally:
        context.close()


@needs_chromium
def test_runners_page_shows_labels_state_and_current_job(seeded, page) -> None:  # type: ignore[no-untyped-def]
    svc, ids = seeded
    page.goto(svc.url + "/runners")
    h200 = page.locator("tr[data-runner=h200-a]").inner_text()
    assert "sm_90" in h200 and "NVIDIA H200" in h200 and "570.86.15" in h200 and "alive" in h200
    assert f"build {ids['running']}" in h200
    assert "gone" in page.locator("tr[data-runner=b200-old]").inner_text()
    assert "revoked" in page.locator("tr[data-runner=retired-1]").inner_text()
    cpu = page.locator("tr[data-runner=ci-cpu-1]")
    assert "cpu only" in cpu.inner_text()
    cpu.locator(f"a[href='/builds/{ids['running']}']").click()
    page.wait_for_url(f"**/builds/{ids['running']}")
    shot_page = page
    shot_page.goto(svc.url + "/runners")
    shot(shot_page, "runners")
