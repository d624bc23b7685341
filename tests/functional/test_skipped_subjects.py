"""Every subject that did not run is named, with one wording for one cause, in the JSON report,
on the grid and the build page (a real headless Chromium), and in the JUnit XML.

A CPU-only build, driven through the real runner protocol of a real service on 127.0.0.1: the
probe finds three knobs and one entry point without its knob; no GPU runner exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from core.subjects import SUBJECTS
from testkit import loopback
from testkit.service import REGISTER, Service
from testkit.wheels import make_wheel

PRESENT = ("flex_attention_bwd", "grouped_gemm_dglu", "grouped_gemm_dsrelu")
ABSENT = "sdpa_bwd"


def _cpu_only_build(svc: Service, tmp_path: Path) -> int:
    wheel = make_wheel(tmp_path, "1.32.0", "")
    with svc.http() as http, wheel.open("rb") as fh:
        resp = http.post("/validate", files={"wheel": (wheel.name, fh)})
    assert resp.status_code == 202, resp.text
    build_id = int(resp.json()["build_id"])
    reg = loopback.post(
        f"{svc.url}/api/runners/register",
        json={"name": "cpu-1", "labels": {}},
        headers={"Authorization": f"Bearer {REGISTER}"},
    )
    runner = svc.http(reg.json()["token"])
    lease = runner.post("/api/jobs/claim", json={}).json()
    job, token = lease["job_id"], lease["lease_token"]
    caps = {
        name: {"importable": True, "knob": SUBJECTS[name].knob, "present": name != ABSENT}
        for name in SUBJECTS
    }
    for name, extra in (
        ("install", {}),
        ("probe", {"version": "1.32.0", "capabilities": caps}),
        ("refusal", {}),
    ):
        body = {"lease_token": token, "result": {"name": name, "status": "pass", **extra}}
        assert runner.post(f"/api/jobs/{job}/stages", json=body).status_code == 201
    assert runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200
    return build_id


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, int, dict]]:
    from testkit.service import service_env

    root = tmp_path_factory.mktemp("skipped")
    svc = Service(data_dir=root / "data", env=service_env(root / "data")).start()
    try:
        build_id = _cpu_only_build(svc, root)
        report = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
        yield svc, build_id, report
    finally:
        svc.stop()


def test_the_report_lists_every_subject_that_did_not_run(built) -> None:  # type: ignore[no-untyped-def]
    _svc, _id, r = built
    assert r["verdict"] == "incomplete"
    not_run = {n["subject"]: n for n in r["not_run"]}
    assert set(not_run) == set(SUBJECTS), r["not_run"]
    for name in PRESENT:
        families = " or ".join(SUBJECTS[name].families)
        assert not_run[name]["status"] == "skipped"
        assert not_run[name]["reason"] == f"skipped: no {families} runner"
    assert not_run[ABSENT]["status"] == "not_applicable"
    assert SUBJECTS[ABSENT].knob in not_run[ABSENT]["reason"]
    # the verdict line names every skipped subject, in the same words; nothing "and 3 more"
    assert "more)" not in r["verdict_reason"]
    for name in PRESENT:
        assert name in r["verdict_reason"]
        assert not_run[name]["reason"] in r["verdict_reason"]


def test_junit_has_a_skipped_testcase_per_subject_not_run(built) -> None:  # type: ignore[no-untyped-def]
    svc, build_id, r = built
    xml = loopback.get(f"{svc.url}/builds/{build_id}/junit.xml").content
    root = ET.fromstring(xml)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    reasons = {n["subject"]: n["reason"] for n in r["not_run"]}
    for name in SUBJECTS:
        case = cases[f"{name}.determinism"]
        skipped = case.find("skipped")
        assert skipped is not None, ET.tostring(case)
        assert reasons[name] in (skipped.get("message") or "")
        assert "skipped: skipped" not in (skipped.get("message") or "")
    assert int(root.get("skipped", "0")) >= len(SUBJECTS)


def test_the_pages_say_the_same_words(built, browser) -> None:  # type: ignore[no-untyped-def]
    svc, build_id, r = built
    reasons = {n["subject"]: n["reason"] for n in r["not_run"]}
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{svc.url}/builds/{build_id}")
        empty = page.locator("#drift-empty").text_content() or ""  # in a folded section
        assert "no GPU job" in empty and "GPU runner" in empty, empty
        for name in PRESENT:  # at the top of the page: what did not run, and why
            item = page.locator(f"#not-run li[data-subject={name}]")
            assert reasons[name] in item.inner_text()
        # a subject that cannot apply is on the first screen too, in the report's words
        absent = page.locator(f"#not-run li[data-subject={ABSENT}]")
        assert reasons[ABSENT] in absent.inner_text()
        assert absent.get_attribute("data-status") == "not_applicable"
        # the grid's hover on each skipped subject says exactly what the report says
        page.goto(f"{svc.url}/")
        row = page.locator(f"#build-{build_id}")
        for name in PRESENT:
            title = row.locator(f"td.subject[data-subject={name}] .st").get_attribute("title")
            assert title == reasons[name], (name, title)
        stage = row.locator("td.stage[data-stage=determinism] .st").get_attribute("title")
        assert stage == "skipped: no sm_80 or sm_90 or sm_100 runner", stage
    finally:
        page.close()
