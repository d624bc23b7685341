"""A build's determinism surface is read once, by its CPU job: a GPU job's lease says
``probe_surface: false`` while the CPU job will read it, and ``true`` where it will not. Real
service on 127.0.0.1, real SQLite; runners driven through the protocol, posting what a probe
with the lease's ``probe_surface`` posts (the real probe's answer to it is tested on the
registry's 1.32.0 in tests/functional/test_probe.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.wire import JobKind, Stage, Status
from service.jobs import surface_reuse
from service.models import Job, StageRow
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel
from tests.helpers import register, report, submit_wheel

KNOBS = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]["1.32.0"][
    "knobs"
]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_wheel(tmp_path_factory.mktemp("wheel"), "9.5.0", "VALUE = 1\n")


def _run(runner: httpx.Client, lease: dict[str, Any]) -> None:
    """Post every stage of the lease, the probe with 1.32.0's surface where the lease asks it
    to read one, then finish."""
    job, token = lease["job_id"], lease["lease_token"]
    for name in lease["stages"]:
        result: dict[str, Any] = {"name": name, "status": "pass", "reason": "r"}
        if name == "probe":
            result["surface"] = KNOBS if lease["probe_surface"] else []
        resp = runner.post(f"/api/jobs/{job}/stages", json={"lease_token": token, "result": result})
        assert resp.status_code == 201, resp.text
    assert runner.post(f"/api/jobs/{job}/finish", json={"lease_token": token}).status_code == 200


def _entry_points(knobs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(k["entry_point"], k["knob"]) for k in knobs}


def test_a_gpu_job_leaves_the_surface_to_the_builds_cpu_job(make_service: Any, wheel: Path) -> None:
    svc: Service = make_service(FE_CI_GPU_ARCHS="sm_90")
    build_id = submit_wheel(svc, wheel)
    cpu, h200 = register(svc, "cpu"), register(svc, "h200", arch="sm_90")
    gpu_lease = h200.post("/api/jobs/claim", json={}).json()
    assert gpu_lease["kind"] == "gpu" and gpu_lease["probe_surface"] is False
    _run(h200, gpu_lease)  # first, as a GPU runner beside a CPU runner may well be
    cpu_lease = cpu.post("/api/jobs/claim", json={}).json()
    assert cpu_lease["kind"] == "cpu" and cpu_lease["probe_surface"] is True
    _run(cpu, cpu_lease)
    r = report(svc, build_id)
    assert _entry_points(r["surface"]) == _entry_points(KNOBS)  # the CPU job's, read once


def _job(kind: str, state: str = "queued", stages: tuple[str, ...] = ("install", "probe")) -> Job:
    return Job(kind=kind, state=state, stages=list(stages), stage_rows=[])


def test_who_reads_the_surface() -> None:
    """The rule on its own: every job but a GPU job whose build's CPU job reads it."""
    gpu, cpu = _job(JobKind.gpu), _job(JobKind.cpu)
    assert surface_reuse.reads_surface(cpu, [cpu, gpu])
    assert not surface_reuse.reads_surface(gpu, [cpu, gpu])  # to come
    assert surface_reuse.reads_surface(gpu, [gpu])  # no CPU job
    no_probe = _job(JobKind.cpu, stages=("install", "refusal"))
    assert surface_reuse.reads_surface(gpu, [no_probe, gpu])
    ended = _job(JobKind.cpu, state="finished")
    assert surface_reuse.reads_surface(gpu, [ended, gpu])  # ended before its probe
    for status, elsewhere in ((Status.pass_, True), (Status.error, False), (Status.skipped, False)):
        done = _job(JobKind.cpu, state="finished")
        done.stage_rows = [StageRow(name=Stage.probe, status=status)]
        assert surface_reuse.reads_surface(gpu, [done, gpu]) is not elsewhere, status
