"""Comparison points through the real service: chosen once, kept while detection walks, re-pinned
only by an operator (admin token) or a new subject definition, each change a marked new series.

No GPU here: each determinism stage is a real CPU measurement (``tests/fakesubjects.py``) under a
GPU subject's name, measured where the lease says and posted as an sm_90 runner posts it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.subjects import SUBJECTS
from runner.inside import plan
from testkit import loopback, processes
from testkit.service import REGISTER, SUBMIT, Service
from testkit.wheels import make_wheel
from tests.fakesubjects import SDPA_CONFIGS, posted_stage
from tests.helpers import register, submit_wheel

ADMIN = "admin-token-for-tests"
S2048, S4096, B8 = SDPA_CONFIGS[1:]
ROOT = Path(__file__).resolve().parents[2]


class Stream:
    """One service, one sm_90 runner, one wheel: builds one after another."""

    def __init__(self, svc: Service, wheel: Path) -> None:
        self.svc, self.wheel = svc, wheel
        self.gpu = register(svc, "h200", arch="sm_90")

    def lease(self) -> dict[str, Any]:
        submit_wheel(self.svc, self.wheel)
        lease: dict[str, Any] = self.gpu.post("/api/jobs/claim", json={}).json()
        assert lease["kind"] == "gpu", lease
        return lease

    def post(self, lease: dict[str, Any], stage: dict[str, Any]) -> httpx.Response:
        body = {"lease_token": lease["lease_token"], "result": stage}
        return self.gpu.post(f"/api/jobs/{lease['job_id']}/stages", json=body)

    def finish(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.gpu.post(
            f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": lease["lease_token"]}
        )
        report: dict[str, Any] = loopback.get(
            f"{self.svc.url}/api/builds/{lease['build_id']}"
        ).json()
        return report

    def build(self, varies: set[str], start: str | None = None, **kw: Any) -> dict[str, Any]:
        """A build: its walk goes where ``varies`` sends it, its comparison where the lease says."""
        lease = self.lease()
        at = plan.comparison_points({"comparison": lease["comparison"]}, "sm_90").get("sdpa_bwd")
        stage = posted_stage("sdpa_bwd", SDPA_CONFIGS, varies, start=start, compare_at=at, **kw)
        resp = self.post(lease, stage)
        assert resp.status_code == 201, resp.text
        return self.finish(lease)


def pins_of(svc: Service) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = loopback.get(f"{svc.url}/api/pins").json()["items"]
    return items


def walked_to(report: dict[str, Any]) -> str:
    (det,) = [s for j in report["jobs"] for s in j["stages"] if s["name"] == "determinism"]
    return str(det["checks"][0]["metrics"]["config_name"])


@pytest.fixture
def stream(make_service, tmp_path: Path) -> Stream:  # type: ignore[no-untyped-def]
    svc = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_ADMIN_TOKEN=ADMIN)
    return Stream(svc, make_wheel(tmp_path / "w", "1.32.0", ""))


def test_the_point_is_chosen_once_and_kept_while_detection_walks(stream: Stream) -> None:
    first = stream.build({S2048, S4096, B8})  # nothing pinned: the walk's config is measured
    assert walked_to(first) == S2048
    (row,) = first["history"]
    assert (row["config"], row["bits"], row["series"]) == (S2048, "first", 1)
    (pin,) = pins_of(stream.svc)
    assert (pin["config"], pin["series"], pin["source"]) == (S2048, 1, "measured")
    assert pin["build_id"] == first["id"] and "varied robustly: 7 of 7" in pin["reason"]
    previous = first["id"]
    # detection escalates as the control goes quiet below; the comparison stays put
    for varies, start, walk in (({S4096, B8}, S2048, S4096), ({B8}, S4096, B8), ({B8}, B8, B8)):
        report = stream.build(varies, start=start)
        assert walked_to(report) == walk
        (row,) = report["history"]
        assert row["config"] == S2048 and row["series"] == 1 and not row["series_start"]
        assert row["bits"] == "unchanged" and row["previous_build_id"] == previous
        previous = report["id"]
    assert len(pins_of(stream.svc)) == 1  # one pinned config per subject and family


def test_the_first_point_takes_up_the_comparisons_made_before_it_was_chosen(
    stream: Stream,
) -> None:
    """As ``sdpa_torch_bwd`` on the H200 (docs/measurements/h200-stream-2026-12-05.txt): its
    control varied in 3 of 7 comparisons for three builds, then 7 of 7; the point chosen then is
    where the earlier builds measured, so the new series compares with them."""
    first = stream.build({S2048}, rarely=True)
    (row,) = first["history"]
    assert walked_to(first) == S2048 and (row["bits"], row["series"]) == ("first", None)
    assert pins_of(stream.svc) == []  # the control did not vary in half its comparisons
    second = stream.build({S2048})
    (pin,) = pins_of(stream.svc)
    assert (pin["config"], pin["series"], pin["build_id"]) == (S2048, 1, second["id"])
    (row,) = second["history"]
    assert (row["config"], row["series"], row["bits"]) == (S2048, 1, "unchanged")
    assert row["previous_build_id"] == first["id"] and not row["series_start"]


def test_a_comparison_off_the_pin_is_refused_and_nothing_of_the_stage_is_stored(
    stream: Stream,
) -> None:
    stream.build({S2048, S4096, B8})
    lease = stream.lease()
    assert [p["config"] for p in lease["comparison"]] == [S2048]
    off = posted_stage("sdpa_bwd", SDPA_CONFIGS, {B8}, compare_at={"config": B8, "series": 1})
    resp = stream.post(lease, off)
    assert resp.status_code == 422, resp.text
    err = resp.json()["error"]
    assert err["code"] == "comparison_not_at_pin" and S2048 in err["message"]
    report = loopback.get(f"{stream.svc.url}/api/builds/{lease['build_id']}").json()
    assert report["history"] == [] and report["drift"] == []
    assert all(j["stages"] == [] for j in report["jobs"] if j["kind"] == "gpu")
    # an unknown config name is refused the same way, naming the subject's configs
    unknown = posted_stage("sdpa_bwd", ("b2_made_up",), {"b2_made_up"})
    resp = stream.post(lease, unknown)
    # (the protocol's door refuses it before the route runs: core/bounds.py)
    err = resp.json()["error"]
    assert resp.status_code == 422 and err["code"] in ("unknown_config", "validation_error")
    assert all(name in json.dumps(err) for name in SDPA_CONFIGS)
    # the same job, measured where it was told, is stored
    at = {"config": S2048, "series": 1}
    assert (
        stream.post(lease, posted_stage("sdpa_bwd", SDPA_CONFIGS, {B8}, compare_at=at)).status_code
        == 201
    )
    assert stream.finish(lease)["history"][0]["bits"] == "unchanged"


def repin(
    svc: Service, token: str | None, body: dict[str, Any], path: str = "sm_90/sdpa_bwd"
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return loopback.post(f"{svc.url}/api/pins/{path}", json=body, headers=headers)


def test_an_operator_re_pins_and_a_new_series_starts_with_a_marker(stream: Stream) -> None:
    svc = stream.svc
    first = stream.build({S2048, S4096, B8})
    second = stream.build({S2048, S4096, B8}, start=S2048)
    # the operator's door only
    for token in (None, SUBMIT, REGISTER, "not-the-admin-token"):
        resp = repin(svc, token, {"config": B8})
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "unauthorized"
    resp = repin(svc, ADMIN, {"config": "b16_huge", "reason": "x"})
    # (the protocol's door refuses it before the route runs: core/bounds.py)
    err = resp.json()["error"]
    assert resp.status_code == 422 and err["code"] in ("unknown_config", "validation_error")
    assert all(name in json.dumps(err) for name in SDPA_CONFIGS)
    assert resp.json()["error"]["detail"]["known"] == list(SUBJECTS["sdpa_bwd"].config_names)
    assert repin(svc, ADMIN, {"config": B8}, "sm_90/no_such_subject").status_code == 404
    assert repin(svc, ADMIN, {"config": B8}, "sm_90/grouped_gemm_dsrelu").status_code == 400
    assert repin(svc, ADMIN, {"config": B8, "extra": 1}).status_code == 422
    assert [p["series"] for p in pins_of(svc)] == [1]  # nothing changed by any of those
    resp = repin(svc, ADMIN, {"config": B8, "reason": "the larger shape varies every run"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["pin"]["series"] == 2 and resp.json()["retired"]["series"] == 1
    third = stream.build({B8}, start=B8)
    (row,) = third["history"]
    assert (row["config"], row["series"], row["series_start"], row["bits"]) == (
        B8,
        2,
        True,
        "first",
    )
    (marker,) = [f for f in third["findings"] if f["kind"] == "comparison_point_changed"]
    assert marker["severity"] == "info" and "series 2" in marker["message"]
    assert "series 1 at " + S2048 in marker["message"] and "operator" in marker["message"]
    fourth = stream.build({B8}, start=B8)
    assert fourth["history"][0]["bits"] == "unchanged" and not fourth["history"][0]["series_start"]
    assert "comparison_point_changed" not in [f["kind"] for f in fourth["findings"]]
    # the old series stays readable, in the reports and the list of pins
    old = loopback.get(f"{svc.url}/api/builds/{second['id']}").json()["history"][0]
    assert (old["series"], old["config"], old["previous_build_id"]) == (1, S2048, first["id"])
    assert [(p["series"], p["in_force"]) for p in pins_of(svc)] == [(2, True), (1, False)]
    trends = loopback.get(f"{svc.url}/trends").text
    assert f"sm_90 sdpa_bwd: series 2 at {B8} from #{third['id']}" in trends
    assert 'class="series-marker"' in trends and f"sm_90 series 1 at {S2048}" in trends


def test_fe_ci_pin_lists_and_re_pins(stream: Stream) -> None:
    stream.build({S2048, S4096, B8})
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(FE_CI_URL=stream.svc.url, FE_CI_ADMIN_TOKEN=ADMIN, PYTHONPATH=str(ROOT))

    def fe_ci(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "cli.main", "pin", *args]
        return processes.run(cmd, env=env, text=True, timeout=120)

    listed = fe_ci()
    assert (
        listed.returncode == 0
        and f"sm_90 sdpa_bwd series 1: {S2048} [measured, in force]" in listed.stdout
    )
    bad = fe_ci("sdpa_bwd", "b16_huge", "--family", "sm_90")
    assert bad.returncode == 4 and S4096 in bad.stderr
    done = fe_ci("sdpa_bwd", S4096, "--family", "sm_90", "--reason", "steadier")
    assert done.returncode == 0, done.stderr
    assert f"now:     sm_90 sdpa_bwd series 2: {S4096} [operator, in force]" in done.stdout
    again = fe_ci("sdpa_bwd", "--family", "sm_90", "--measure")
    assert again.returncode == 0 and "now:     none" in again.stdout
    lease = stream.lease()  # nothing in force: the next robust measurement chooses
    assert lease["comparison"] == []


EXTRA = """\
from core.subjects import Subject

DECLARATION = Subject(
    name="toy_sum_bwd",
    entry_point="toy_frontend.sum_bwd",
    knob="deterministic",
    families=("sm_90",),
    outputs={{"dx": {{"atol": 1e-2, "rtol": 1e-4}}}},
    configs={configs},
    comparison={comparison!r},
)
"""


def test_a_new_subject_definition_starts_a_new_series(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The service reads the subject's definition from its declaration (here a subject module
    named by ``FE_CI_EXTRA_SUBJECTS``, as ``docs/adding-a-subject.md`` describes); restarted with
    a changed one, it starts afresh."""
    extra = tmp_path / "toy_sum_bwd.py"
    v1 = (("n4096", {"n": 4096}), ("n65536", {"n": 65536}))
    extra.write_text(EXTRA.format(configs=v1, comparison=""))
    svc = make_service(FE_CI_GPU_ARCHS="sm_90", FE_CI_EXTRA_SUBJECTS=str(extra))
    stream = Stream(svc, make_wheel(tmp_path / "w", "1.32.0", ""))
    names = ("n4096", "n65536")
    lease = stream.lease()
    assert stream.post(lease, posted_stage("toy_sum_bwd", names, set(names))).status_code == 201
    assert stream.finish(lease)["history"][0]["series"] == 1
    # a third config, declared the comparison point: a new definition
    svc.stop()
    extra.write_text(EXTRA.format(configs=(*v1, ("n1048576", {"n": 1048576})), comparison="n65536"))
    svc.start()
    lease = stream.lease()
    (point,) = lease["comparison"]
    assert (point["config"], point["series"], point["source"]) == ("n65536", 2, "declared")
    names += ("n1048576",)
    at = plan.comparison_points({"comparison": lease["comparison"]}, "sm_90")["toy_sum_bwd"]
    stage = posted_stage("toy_sum_bwd", names, set(names), compare_at=at)
    assert stream.post(lease, stage).status_code == 201
    report = stream.finish(lease)
    assert report["history"][0]["series"] == 2 and report["history"][0]["series_start"]
    old, new = sorted(pins_of(svc), key=lambda p: p["series"])
    assert not old["in_force"] and not old["definition_current"]
    assert new["in_force"] and new["definition_current"] and "declared" in new["reason"]
