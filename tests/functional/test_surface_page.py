"""The determinism surface through the real service (uvicorn on 127.0.0.1, SQLite), a real runner
protocol and a real headless Chromium: a CPU-only fleet's two builds of a line, 1.31.0 then
1.32.0, whose probes post the surfaces the ledger measured from the registry's wheels (the second
with the dGLU knob dropped and a knob whose name and default are hostile text). The report, the
JUnit and the build page's first screen carry the coverage; the line's findings name the knob.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import surface
from testkit import loopback
from testkit.service import ROOT, Service, service_env
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel

LEDGER = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]
DGLU = "cudnn.grouped_gemm_dglu_wrapper_sm100"
HOSTILE = {
    "entry_point": "cudnn.<img src=x onerror=alert(1)>",
    "knob": "deterministic\u2028<b>bold</b>",
    "default": "'</code><script>window.pwned=1</script>'",
    "kind": "parameter",
    "method": "ast",
}
CAPS = {
    n: {"importable": True, "knob": k, "present": True, "default": "False", "method": "signature"}
    for n, k in {
        "grouped_gemm_dsrelu": "deterministic",
        "grouped_gemm_dglu": "deterministic",
        "flex_attention_bwd": "deterministic",
        "sdpa_bwd": "use_deterministic_algorithm",
    }.items()
}


def _post(client: httpx.Client, stages: list[dict[str, Any]]) -> None:
    lease = client.post("/api/jobs/claim", json={}).json()
    assert lease.get("job_id"), lease
    for result in stages:
        body = {"lease_token": lease["lease_token"], "result": result}
        resp = client.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
        assert resp.status_code == 201, resp.text
    done = {"lease_token": lease["lease_token"]}
    assert client.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def _build(svc: Service, tmp: Path, version: str, knobs: list[dict[str, Any]]) -> int:
    build_id = submit_wheel(svc, make_wheel(tmp, version, ""))
    probe = {
        "name": "probe",
        "status": "pass",
        "capabilities": CAPS,
        "surface": knobs,
        "findings": surface.uncovered(knobs),  # what the probe adds (runner/inside/discovery)
    }
    _post(register(svc, f"cpu-{build_id}"), [{"name": "install", "status": "pass"}, probe])
    return build_id


@pytest.fixture(scope="module")
def line(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, int, int]]:
    root = tmp_path_factory.mktemp("surface")
    env = service_env(root / "data", FE_CI_GPU_ARCHS="")
    svc = Service(data_dir=root / "data", env=env).start()
    try:
        old = _build(svc, root / "a", "1.31.0", LEDGER["1.31.0"]["knobs"])
        doctored = [k for k in LEDGER["1.32.0"]["knobs"] if k["entry_point"] != DGLU]
        new = _build(svc, root / "b", "1.32.0", [*doctored, HOSTILE])
        yield svc, old, new
    finally:
        svc.stop()


def test_the_report_states_the_coverage_of_a_cpu_only_run(line) -> None:  # type: ignore[no-untyped-def]
    svc, _old, new = line
    report = loopback.get(f"{svc.url}/api/builds/{new}").json()
    rows = report["coverage"]["rows"]
    assert len(report["surface"]) == len(rows) == len(LEDGER["1.32.0"]["knobs"])  # -1 +1
    assert report["coverage"]["summary"] == surface.summary(rows)
    assert report["coverage"]["summary"].startswith(f"{len(rows)} knobs: 0 exercised, 0 compile")
    by = {(r["entry_point"], r["knob"]): r for r in rows}
    flex = by[("cudnn.flex_attn_func", "deterministic")]
    assert flex["status"] == "not_covered" and flex["subject"] == "flex_attention_bwd"
    assert flex["why"] == (
        "would run as flex_attention_bwd on sm_90, sm_100; no job of those families ran it"
    )
    hstu = by[("cudnn.hstu_attention_backward", "deterministic")]
    assert hstu["subject"] is None and hstu["why"] == "no subject exercises it"
    kinds = {(f["kind"], f["severity"]) for f in report["findings"]}
    assert ("knob_not_covered", "warning") in kinds


def test_the_line_names_the_knob_removed_and_the_knobs_added(line) -> None:  # type: ignore[no-untyped-def]
    svc, old, new = line
    report = loopback.get(f"{svc.url}/api/builds/{new}").json()
    removed = [f for f in report["findings"] if f["kind"] == "knob_removed"]
    assert [f["severity"] for f in removed] == ["error"]
    assert f"{DGLU}(deterministic=False) is gone" in removed[0]["message"]
    assert f"previous build #{old}, 1.31.0" in removed[0]["message"]
    assert report["verdict"] == "fail"
    assert any(c["name"] == "knob_removed" for c in report["causes"])
    added = [f["message"] for f in report["findings"] if f["kind"] == "knob_added"]
    assert any(m.startswith(HOSTILE["entry_point"]) for m in added), added
    first = loopback.get(f"{svc.url}/api/builds/{old}").json()
    assert not [f for f in first["findings"] if f["kind"].startswith("knob_") and
                f["kind"] != "knob_not_covered"]  # fmt: skip


def test_the_junit_carries_the_coverage(line) -> None:  # type: ignore[no-untyped-def]
    svc, _old, new = line
    xml = loopback.get(f"{svc.url}/builds/{new}/junit.xml").content
    root = ET.fromstring(xml)
    (suite,) = [s for s in root.iter("testsuite") if s.get("name") == "determinism surface"]
    summary = suite.find("properties/property[@name='coverage']")
    assert summary is not None and summary.get("value", "").endswith("not covered")
    cases = suite.findall("testcase")
    assert len(cases) == len(LEDGER["1.32.0"]["knobs"])
    assert int(suite.get("skipped", "0")) == len(cases)  # nothing exercised on a CPU-only fleet
    hostile = [c for c in cases if "onerror" in c.get("name", "")]
    assert len(hostile) == 1  # carried as an attribute, escaped by the XML writer


def test_a_browser_reads_the_coverage_on_the_first_screen(line, browser) -> None:  # type: ignore[no-untyped-def]
    svc, _old, new = line
    report = loopback.get(f"{svc.url}/api/builds/{new}").json()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(f"{svc.url}/builds/{new}")
        line_shown = page.locator("#coverage-summary")
        assert line_shown.inner_text() == report["coverage"]["summary"]
        box = line_shown.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800  # the first screen
        page.locator("#coverage summary").click()
        hostile = page.locator("#coverage-table tr", has_text="onerror")
        assert hostile.count() == 1
        cells = hostile.locator("td code")
        assert cells.nth(0).inner_text() == HOSTILE["entry_point"]
        assert cells.nth(2).inner_text() == HOSTILE["default"]
        assert (
            page.locator("#coverage-table img, #coverage-table script, #coverage-table b").count()
            == 0
        )
        assert page.evaluate("window.pwned") is None
    finally:
        context.close()
