"""Remembered configs round trip: a GPU job's chosen config, stored by the service, comes back
in the next lease of its family and is where the next build's escalation starts.

The subject is a fake (``tests.fakesubjects``): the real ones need a CUDA GPU. The service, its
SQLite file, the runner protocol and the determinism harness are real; the runner's posts are
made by hand with what the determinism stage would have produced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import torch

from cli import validate
from core import remembered
from core.comparable import ComparableKey, ConfigKey, normalize_backend
from core.subjects import SUBJECTS
from core.wire import BuildReport, JobLease
from runner.inside import measure, plan
from testkit import loopback
from testkit.service import Service
from tests.fakesubjects import FakeSubject, Reduction, floats, integers
from tests.helpers import register, report, submit_wheel

H200 = {"gpu": "NVIDIA H200", "cudnn_backend": "9.19.0"}
# The fake measures under a real subject's name and configs: the service remembers only configs
# the registry declares for a subject. Its three, small to large, stand for steady integer sums
# (never vary), a float sum that varies until the test holds it steady, and one that always does.
SUBJECT = "sdpa_bwd"
INTS, SMALL, LARGE = SUBJECTS[SUBJECT].config_names[:3]


def _claim_gpu(runner: httpx.Client) -> JobLease:
    lease = JobLease.model_validate(runner.post("/api/jobs/claim", json={}).json())
    assert lease.kind == "gpu" and lease.family == "sm_90"
    return lease


def _measure(subject: FakeSubject, lease: JobLease, host: dict[str, str]) -> dict[str, Any]:
    """What the determinism stage does with a lease: match its host, start there, measure."""
    params = {"remembered": [r.model_dump() for r in lease.start_configs]}
    starts = plan.start_configs(params, "sm_90", host)
    start = starts.get(subject.name) or {}
    settings = measure.Settings(repeats=8, max_repeats=64, luck_target=1e-3)
    out = measure.measure_subject(
        subject,
        torch.device("cpu"),
        settings,
        start_config=start.get("config"),
        start_from=start.get("build_id"),
    )
    return out.check


def _post_and_finish(
    runner: httpx.Client, lease: JobLease, check: dict[str, Any], environment: dict[str, str]
) -> None:
    token = lease.lease_token
    stage = {"name": "determinism", "status": check["status"], "checks": [check]}
    resp = runner.post(
        f"/api/jobs/{lease.job_id}/stages", json={"lease_token": token, "result": stage}
    )
    assert resp.status_code == 201, resp.text
    resp = runner.post(
        f"/api/jobs/{lease.job_id}/finish",
        json={"lease_token": token, "environment": environment},
    )
    assert resp.status_code == 200, resp.text


def test_a_chosen_config_comes_back_in_the_next_lease_and_escalates_when_it_stops_varying(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    runner = register(svc, "h200", arch="sm_90", gpu="NVIDIA H200")
    steady = {SMALL: False}
    made = {
        INTS: lambda: Reduction(*integers(4096)),
        SMALL: lambda: Reduction(*(integers(2048) if steady[SMALL] else floats(2048, 5))),
        LARGE: lambda: Reduction(*floats(8192, 6)),
    }

    def subject() -> FakeSubject:
        return FakeSubject(lambda n: made[n](), names=tuple(made), name=SUBJECT)

    # build 1: nothing remembered; escalates INTS -> SMALL. The probe spells the backend 91900.
    b1 = submit_wheel(svc)
    lease = _claim_gpu(runner)
    assert lease.build_id == b1 and lease.start_configs == []
    first = subject()
    check = _measure(first, lease, H200)
    assert first.prepared == [INTS, SMALL] and check["metrics"]["start"] is None
    _post_and_finish(runner, lease, check, {"gpu": "NVIDIA H200", "cudnn_backend": "91900"})

    # build 2: the lease carries build 1's config for this GPU and backend; kept, no escalation
    b2 = submit_wheel(svc)
    lease = _claim_gpu(runner)
    assert lease.build_id == b2
    assert [r.model_dump() for r in lease.start_configs] == [
        {
            "subject": SUBJECT,
            "family": "sm_90",
            "gpu": "NVIDIA H200",
            "cudnn_backend": "9.19.0",
            "config": SMALL,
            "build_id": b1,
        }
    ]
    # another GPU model or backend does not use it: its config was chosen on other kernels
    other = {"gpu": "NVIDIA H100 80GB HBM3", "cudnn_backend": "9.19.0"}
    assert (
        plan.start_configs({"remembered": [lease.start_configs[0].model_dump()]}, "sm_90", other)
        == {}
    )
    second = subject()
    check = _measure(second, lease, H200)
    assert second.prepared == [SMALL]
    assert check["metrics"]["start"] == {
        "config": SMALL,
        "build_id": b1,
        "outcome": "kept",
        "chosen": SMALL,
    }
    _post_and_finish(runner, lease, check, {**H200})
    page = loopback.get(f"{svc.url}/builds/{b2}").text
    assert f"remembered config {SMALL} from build #{b1}" in page
    shown = report(svc, b2)["jobs"]
    gpu_job = next(j for j in shown if j["kind"] == "gpu")
    (det,) = [s for s in gpu_job["stages"] if s["name"] == "determinism"]
    assert det["checks"][0]["metrics"]["start"]["outcome"] == "kept"

    # build 3: the remembered config stopped varying; the walk goes up, never down
    steady[SMALL] = True
    b3 = submit_wheel(svc)
    lease = _claim_gpu(runner)
    assert [(r.config, r.build_id) for r in lease.start_configs] == [(SMALL, b2)]
    third = subject()
    check = _measure(third, lease, H200)
    assert third.prepared == [SMALL, LARGE]
    assert check["metrics"]["start"]["outcome"] == "escalated"
    assert check["metrics"]["config"]["name"] == LARGE
    _post_and_finish(runner, lease, check, {**H200})

    # build 4 starts where build 3 ended
    submit_wheel(svc)
    lease = _claim_gpu(runner)
    assert [(r.config, r.build_id) for r in lease.start_configs] == [(LARGE, b3)]
    with svc.db() as conn:
        rows = conn.execute(
            "SELECT subject, family, gpu, cudnn_backend, config, build_id FROM chosen_configs"
        ).fetchall()
    assert rows == [(SUBJECT, "sm_90", "NVIDIA H200", "9.19.0", LARGE, b3)]

    # fe-ci validate --previous REPORT: the report's configs, the same way
    path = tmp_path / "previous.json"
    path.write_text(json.dumps(report(svc, b3)))
    _caps, remembered, _report = validate._load_previous(path)
    assert [(r.subject, r.config, r.build_id, r.gpu) for r in remembered] == [
        (SUBJECT, LARGE, b3, "NVIDIA H200")
    ]


def test_a_config_whose_control_never_varied_is_not_remembered() -> None:
    subject = FakeSubject(lambda _n: Reduction(*integers(1024)), names=(INTS,), name=SUBJECT)
    settings = measure.Settings(repeats=4, max_repeats=8)
    out = measure.measure_subject(subject, torch.device("cpu"), settings)
    assert out.check["status"] == "inconclusive"
    report = BuildReport.model_validate(
        {
            "id": 5,
            "source": "wheel",
            "status": "finished",
            "verdict": "inconclusive",
            "jobs": [
                {
                    "kind": "gpu",
                    "family": "sm_90",
                    "status": "finished",
                    "environment": H200,
                    "stages": [
                        {"name": "determinism", "status": "inconclusive", "checks": [out.check]}
                    ],
                }
            ],
        }
    )
    assert remembered.from_report(report) == []


def test_the_keys_fold_the_spellings_of_one_backend_and_one_gpu() -> None:
    assert normalize_backend(91900) == normalize_backend("9.19.0") == "9.19.0"
    assert normalize_backend("8907") == "8.9.7"
    assert ConfigKey.of("s", "sm_90", " NVIDIA  H200 ", "91900") == ConfigKey(
        "s", "sm_90", "NVIDIA H200", "9.19.0"
    )
    a = ComparableKey.of("s", "c", "sm_90", gpu="NVIDIA H200", torch="2.11.0", cudnn_backend=91900)
    b = ComparableKey.of(
        "s", "c", "sm_90", gpu="NVIDIA H200", torch="2.11.0", cudnn_backend="9.19.0"
    )
    assert a == b and a.as_dict()["cudnn_backend"] == "9.19.0"
    assert a != ComparableKey.of(
        "s", "c", "sm_90", gpu="NVIDIA H200", torch="2.12.0", cudnn_backend="9.19.0"
    )
