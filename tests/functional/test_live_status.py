"""A build's page and the grid follow a running build live, in a real headless Chromium against a
real service (uvicorn on 127.0.0.1): the build is driven through the real runner protocol, and
the pages update over their event stream without a reload. Also the stream itself.
"""

from __future__ import annotations

import time
from typing import Any

from testkit import loopback
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel


def _stage_state(page: Any, stage: str) -> str:
    return page.eval_on_selector(
        f"#live-jobs .step[data-stage={stage}] .st", "e => e.dataset.state"
    )


def test_a_running_build_updates_without_a_reload(make_service, page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Submit a wheel, then drive its CPU job through the runner protocol while the build page and
    the grid are open; both follow without navigating."""
    svc = make_service(FE_CI_SWEEP_INTERVAL_S="0.3")
    build_id = submit_wheel(svc, make_wheel(tmp_path, "1.32.0", ""))
    grid = page.context.new_page()
    grid.goto(svc.url + "/")
    assert grid.locator(f"#build-{build_id} td.verdict .st").inner_text() == "pending"
    page.goto(f"{svc.url}/builds/{build_id}")
    assert _stage_state(page, "install") == "waiting"  # no runner is alive yet
    page.evaluate("window.__still_here = true")
    grid.evaluate("window.__still_here = true")

    runner = register(svc, "live-1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    job, token = lease["job_id"], lease["lease_token"]
    page.wait_for_function(
        "document.querySelector('#live-jobs .step[data-stage=install] .st').dataset.state"
        " === 'running'"
    )
    assert "live-1" in page.locator("#live-jobs").inner_text()

    def post(name: str, **result: Any) -> None:
        body = {"lease_token": token, "result": {"name": name, "status": "pass", **result}}
        assert runner.post(f"/api/jobs/{job}/stages", json=body).status_code == 201

    post("install", reason="installed", duration_s=3.2)
    page.wait_for_function(
        "document.querySelector('#live-jobs .step[data-stage=probe] .st').dataset.state"
        " === 'running'"
    )
    assert _stage_state(page, "install") == "pass"
    assert "1/3 stages" in page.locator("#live-jobs").inner_text()
    cap = {"importable": True, "knob": "use_deterministic_algorithm", "present": True}
    post("probe", reason="probed", version="1.32.0", capabilities={"sdpa_bwd": cap})
    post("refusal", reason="80 rows")
    assert runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200
    page.wait_for_function("document.querySelector('#verdict .st').dataset.state === 'incomplete'")
    page.wait_for_function("document.querySelector('#live').dataset.live === '0'")
    assert _stage_state(page, "refusal") == "pass"
    assert page.evaluate("window.__still_here") is True
    grid.wait_for_function(
        f"document.querySelector('#build-{build_id} td.verdict .st').dataset.state"
        " === 'incomplete'",
        timeout=15_000,
    )
    assert grid.evaluate("window.__still_here") is True


def test_live_status_stream_sends_snapshots(make_service, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The event stream itself: a snapshot now, another when a stage lands, then it ends."""
    svc = make_service()
    build_id = submit_wheel(svc, make_wheel(tmp_path, "1.32.0", ""))
    runner = register(svc, "sse-1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    events: list[str] = []
    with loopback.stream("GET", f"{svc.url}/builds/{build_id}/events", timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        posted = False
        deadline = time.monotonic() + 20
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line)
                if not posted:
                    for name in ("install", "probe", "refusal"):
                        body = {"lease_token": token, "result": {"name": name, "status": "pass"}}
                        runner.post(f"/api/jobs/{job}/stages", json=body)
                    runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token})
                    posted = True
            assert time.monotonic() < deadline
    assert len(events) >= 2
    assert '"finished": true' in events[-1] and '"finished": false' in events[0]
    assert loopback.get(f"{svc.url}/builds/{build_id}/live.json").json()["finished"] is True
