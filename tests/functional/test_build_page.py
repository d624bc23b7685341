"""A build's page and its grid row, cause first: a real service (uvicorn on 127.0.0.1, SQLite) and
a real headless Chromium at 1280x800.

Two builds of an H200 fleet go through the real runner protocol: a CPU job and an sm_90 job
each post what such a runner posts (this machine has no GPU, so the sm_90 job's results are
written here; no sm_100 runner exists, as on the fleet). One passes everything it can run
(incomplete, gate green); one fails a determinism check with a long detail and its probe finds
a version lie. With ``FE_CI_SCREENSHOTS=1`` the test retakes docs/screenshots/build-cause.png
and build-gate.png; otherwise it writes nothing into the tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import product
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.frontend_refusals import REUSED_CHECK
from testkit import loopback
from testkit.service import ROOT, Service, service_env
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel

VIEW = {"width": 1280, "height": 800}
LONG = "compile-only: " + "the sm_100a kernel compiled with the knob on and off; " * 14
ACTIVATIONS = ("srelu", "swiglu")
REQUESTS = ("none", "env", "torch_flag", "both", "env_allow+torch_flag")


def _refusal_rows() -> list[dict[str, Any]]:
    rows = []
    for act, req, sb, fb, us in product(ACTIVATIONS, REQUESTS, *[(False, True)] * 3):
        asked = req != "none" and req != "env_allow" and not us
        expected = "deterministic" if asked else "default"
        rows.append(
            {"activation": act, "request": req, "scale_bias": sb, "fc1_bias": fb,
             "unit_scale": us, "expected": expected, "observed": expected, "status": "pass"}
        )  # fmt: skip
    return rows


def _caps() -> dict[str, Any]:
    knobs = {
        "grouped_gemm_dsrelu": "deterministic",
        "grouped_gemm_dglu": "deterministic",
        "flex_attention_bwd": "deterministic",
        "sdpa_bwd": "use_deterministic_algorithm",
    }
    return {n: {"importable": True, "knob": k, "present": True} for n, k in knobs.items()}


def _run(client: httpx.Client, stages: list[dict[str, Any]]) -> None:
    lease = client.post("/api/jobs/claim", json={}).json()
    assert lease.get("job_id"), lease
    for result in (s for s in stages if s["name"] in lease["stages"]):  # as a runner does
        body = {"lease_token": lease["lease_token"], "result": result}
        resp = client.post(f"/api/jobs/{lease['job_id']}/stages", json=body)
        assert resp.status_code == 201, resp.text
    done = {"lease_token": lease["lease_token"]}
    assert client.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def _h200_build(svc: Service, tmp: Path, *, broken: bool) -> int:
    build_id = submit_wheel(svc, make_wheel(tmp, "1.28.0" if broken else "1.32.0", ""))
    probe: dict[str, Any] = {"name": "probe", "status": "pass", "capabilities": _caps()}
    if broken:
        lie = "reports 1.28.0 but grouped_gemm_dglu_wrapper_sm100 has no 'deterministic'"
        probe["findings"] = [
            {"kind": "version_feature_mismatch", "severity": "error",
             "subject": "grouped_gemm_dglu", "message": lie}
        ]  # fmt: skip
    sdpa = ("fail", f"dq differed from run 0 in 3 of 23 runs; {LONG}") if broken else ("pass", "")
    checks = [
        {"name": f"{n}.deterministic", "status": "skipped", "detail": "needs sm_100"}
        for n in ("grouped_gemm_dsrelu", "grouped_gemm_dglu")
    ] + [
        {"name": "flex_attention_bwd.deterministic", "status": "pass", "detail": "exact"},
        {"name": "sdpa_bwd.deterministic", "status": sdpa[0], "detail": sdpa[1],
         "metrics": {"config_name": "b4_h16_s2048_d128_causal"}},
    ]  # fmt: skip
    refusal = {"name": "refusal", "status": "pass", "refusal": _refusal_rows()}
    install = {"name": "install", "status": "pass"}
    gpu = register(svc, f"h200-{build_id}", arch="sm_90")
    # the determinism stage says pass: its cell must still show its failing check
    det = {"name": "determinism", "status": "pass", "checks": checks}
    # the lease asks the sm_90 job for the frontend's own refusal rows only: none runs here
    own = {"name": "refusal", "status": "not_applicable",
           "checks": [{"name": REUSED_CHECK, "status": "not_applicable"}]}  # fmt: skip
    _run(gpu, [install, probe, det, {"name": "numerics", "status": "pass"}, own])
    _run(register(svc, f"cpu-{build_id}"), [install, probe, refusal])
    return build_id


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, int, int]]:
    root = tmp_path_factory.mktemp("page")
    data = root / "data"
    env = service_env(data, FE_CI_GPU_ARCHS="sm_90", FE_CI_REQUIRE="probe,refusal,sm_90")
    svc = Service(data_dir=data, env=env).start()
    try:
        green = _h200_build(svc, root / "a", broken=False)
        red = _h200_build(svc, root / "b", broken=True)
        yield svc, green, red
    finally:
        svc.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEW)
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()


def _bottom(page: Any, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return float(box["y"] + box["height"])


def _shot(page: Any, name: str) -> None:
    if os.environ.get("FE_CI_SCREENSHOTS") == "1":
        page.screenshot(path=str(ROOT / "docs" / "screenshots" / f"{name}.png"))


def test_the_first_screen_holds_verdict_gate_cause_and_what_did_not_run(fleet, page) -> None:  # type: ignore[no-untyped-def]
    svc, green, red = fleet
    report = loopback.get(f"{svc.url}/api/builds/{red}").json()
    assert report["verdict"] == "fail" and report["gate"]["conclusion"] == "failure"
    names = [c["name"] for c in report["causes"]]
    assert names == ["sdpa_bwd.deterministic", "version_feature_mismatch"]
    assert len(report["verdict_reason"]) <= 240
    assert all(n in report["verdict_reason"] for n in names)  # every cause named, not the first
    page.goto(f"{svc.url}/builds/{red}")
    causes = page.locator("#causes li.cause")
    assert causes.count() == 2
    first = causes.nth(0).inner_text()
    assert "sdpa_bwd.deterministic" in first and "dq differed from run 0" in first
    assert "fe-ci validate nvidia_cudnn_frontend-1.28.0" in first and "--config" in first
    assert "version_feature_mismatch" in causes.nth(1).inner_text()
    assert "failure" in page.locator("#gate").inner_text()
    for selector in ("#verdict", "#gate", "#causes li.cause >> nth=1", "#not-run"):
        assert _bottom(page, selector) <= VIEW["height"], selector
    skipped = page.locator("#not-run li[data-subject]")
    assert sorted(skipped.evaluate_all("els => els.map(e => e.dataset.subject)")) == [
        "grouped_gemm_dglu",
        "grouped_gemm_dsrelu",
    ]
    _shot(page, "build-cause")
    page.goto(f"{svc.url}/builds/{green}")
    gate = page.locator("#gate")
    assert "success" in gate.inner_text() and "probe, refusal, sm_90" in gate.inner_text()
    assert page.locator("#verdict .st").get_attribute("data-state") == "incomplete"
    assert page.locator("#causes").count() == 0
    assert _bottom(page, "#not-run") <= VIEW["height"]
    _shot(page, "build-gate")


def test_each_matrix_once_and_the_rest_folded(fleet, page) -> None:  # type: ignore[no-untyped-def]
    svc, green, _red = fleet
    report = loopback.get(f"{svc.url}/api/builds/{green}").json()
    assert len(report["refusal"]) == 80  # the CPU job decided all 80 rows; sm_90 reused them
    page.goto(f"{svc.url}/builds/{green}")
    assert page.locator("table.refusal").count() == 1
    assert page.locator("table.refusal tbody td.cell").count() == 80
    heading = page.locator("#refusal-section h3").text_content() or ""
    cpu, gpu = (j["id"] for j in sorted(report["jobs"], key=lambda j: j["kind"]))
    assert f"cpu job {cpu}, sm_90 job {gpu} (reused)" in heading, heading
    folded = page.locator("details.section:not([open])")
    assert folded.count() >= 6
    assert not page.locator("table.refusal").is_visible()  # folded: nothing to look at there
    page.locator("#refusal-section > summary").click()
    assert page.locator("table.refusal").is_visible()
    # a link to a job (a commit status's) opens the fold around it
    page.goto(f"{svc.url}/builds/{green}#job-{gpu}")
    assert page.locator(f"#job-{gpu}").is_visible()


def test_grid_cells_show_the_worst_check_and_a_failing_finding(fleet, page) -> None:  # type: ignore[no-untyped-def]
    svc, green, red = fleet
    page.goto(f"{svc.url}/")
    row = page.locator(f"#build-{red}")
    probe = row.locator("td.stage[data-stage=probe] .st")
    assert probe.evaluate_all("els => els.map(e => e.dataset.state)") == ["fail"]
    assert "version_feature_mismatch" in (probe.first.get_attribute("title") or "")
    det = row.locator("td.stage[data-stage=determinism] .st").first
    assert det.get_attribute("data-state") == "fail"
    assert "sdpa_bwd.deterministic" in (det.get_attribute("title") or "")
    ok = page.locator(f"#build-{green} td.stage[data-stage=probe] .st").first
    assert ok.get_attribute("data-state") == "pass"
