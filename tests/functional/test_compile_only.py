"""Compile-only in the determinism stage: in the background, reused per compile cache key, timed.

The stage runs for real (in-process, no GPU: the grouped-GEMM subjects are skipped and compiled
only); the compile-only worker is ``tests.fakecompileonly``, a double for the sm_100a compile this
host cannot do. The cache directories are prepared and published by the real
``runner.cache.compile_cache.Store``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from core.wire import Stage, StageResult
from runner.cache import compile_cache
from runner.inside import arms, compileonly, determinism, documents
from runner.inside.arms import Arm
from runner.isolation import candidate
from runner.pipeline import stage_results
from testkit import loopback
from testkit.service import Service
from tests.helpers import register, report, stage_body, submit_wheel

ROOT = Path(__file__).resolve().parents[2]
GROUPED = list(compileonly.COMPILE_ONLY)
CAPS = {n: {"importable": True, "present": True} for n in GROUPED}


@pytest.fixture
def fake_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stage, CPU only, with the compile-only worker replaced by the double; its log dir."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in candidate.RUNNER_OWNED_ENV:  # the in-process stage sets them: restore after
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(compileonly, "WORKER", "tests.fakecompileonly")
    log = tmp_path / "worker-log"
    log.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("FAKE_COMPILE_DIR", str(log))
    monkeypatch.setenv("FAKE_COMPILE_PEERS", ",".join(GROUPED))
    return log


def _stage(cache_dir: Path, key: str | None, source_key: str | None = None) -> dict[str, Any]:
    return determinism.run(
        {
            "subjects": GROUPED,
            "capabilities": CAPS,
            "compile_cache_dir": str(cache_dir),
            "compile_cache_key": key,
            "compile_cache_source_key": source_key,
            "launched_at": time.time(),  # as the pipeline sets it
        }
    )


def _compile_only(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"].split(".")[0]: c for c in doc["checks"]}


def _intervals(log: Path) -> list[tuple[float, float]]:
    out = []
    for start in log.glob("*.start"):
        end = start.with_suffix(".end")
        out.append((float(start.read_text()), float(end.read_text())))
    return sorted(out)


def test_compile_only_runs_in_the_background_concurrently(
    fake_worker: Path, tmp_path: Path
) -> None:
    doc = _stage(tmp_path / "cache", None)
    spans = _intervals(fake_worker)
    assert len(spans) == len(GROUPED)
    first, *rest = spans
    assert all(first[0] < b[0] < first[1] for b in rest)  # each started before the first ended
    for name, check in _compile_only(doc).items():
        assert check["status"] == "skipped"
        result = check["metrics"]["compile_only"]
        assert result["status"] == "pass" and result["reused"] is False
        assert result["arch"] == "sm_100a" and result["cuda_visible_devices"] == ""
        assert "compiled here" in check["detail"]
        assert doc["timings"][name] == {"compile_only_s": result["wall_s"], "reused": False}
    stage = doc["timings"]["stage"]
    assert stage["compile_only_wait_s"] >= 0 and stage["total_s"] >= stage["compile_only_wait_s"]


def test_a_result_is_reused_under_the_same_key_and_not_under_another(
    fake_worker: Path, tmp_path: Path
) -> None:
    store = compile_cache.Store(tmp_path / "store")
    first = store.stage_dir()
    store.prepare("k1", first)
    cold = _stage(first, "k1")
    assert len(list(fake_worker.glob("*.start"))) == len(GROUPED)
    published, refused = store.publish("k1", first)
    assert refused == [] and published == len(GROUPED)
    kept = store.published("k1") / "compile-only"
    assert sorted(p.name for p in kept.iterdir()) == [f"{n}-sm_100a.json" for n in sorted(GROUPED)]

    warm_dir = store.stage_dir()
    store.prepare("k1", warm_dir)
    warm = _stage(warm_dir, "k1")
    assert len(list(fake_worker.glob("*.start"))) == len(GROUPED)  # nothing compiled again
    for name, check in _compile_only(warm).items():
        result = check["metrics"]["compile_only"]
        assert result["reused"] is True and result["status"] == "pass"
        source = result["reused_from"]
        assert source["key"] == "k1" and source["file"] == f"compile-only/{name}-sm_100a.json"
        before = _compile_only(cold)[name]["metrics"]["compile_only"]
        assert source["wall_s"] == before["wall_s"]
        assert result["deterministic"] == before["deterministic"]
        assert "reused" in check["detail"] and "compiled here" not in check["detail"]
        assert warm["timings"][name]["reused"] is True

    other = store.stage_dir()
    store.prepare("k2", other)
    fresh = _stage(other, "k2")
    assert len(list(fake_worker.glob("*.start"))) == 2 * len(GROUPED)  # another key compiles
    assert all(not c["metrics"]["compile_only"]["reused"] for c in _compile_only(fresh).values())


def test_a_result_kept_under_the_kernel_sources_key_serves_another_candidate(
    fake_worker: Path, tmp_path: Path
) -> None:
    """A trusted build's result, published under its whole key and its sources' key, is found
    by a build with other files but the same kernel sources (the runner links both keys)."""
    store = compile_cache.Store(tmp_path / "store")
    first = store.stage_dir()
    store.prepare("whole-1", first)
    _stage(first, "whole-1", "src-k")
    store.publish("whole-1", first)
    assert store.publish("src-k", first) == (len(GROUPED), [])  # a trusted build's
    assert len(list(fake_worker.glob("*.start"))) == len(GROUPED)
    second = store.stage_dir()
    store.prepare("whole-2", second)
    assert store.link("src-k", second) == len(GROUPED)
    doc = _stage(second, "whole-2", "src-k")
    assert len(list(fake_worker.glob("*.start"))) == len(GROUPED)  # nothing compiled again
    for check in _compile_only(doc).values():
        result = check["metrics"]["compile_only"]
        assert result["reused"] is True and result["reused_from"]["key"] == "src-k"
    assert doc["compile_cache"]["source_key"] == "src-k"


def test_a_kept_result_of_another_key_or_subject_is_not_reused(
    fake_worker: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    _stage(cache, "k1")
    # a document copied into another key's directory names its own key: not reused there
    moved = tmp_path / "moved"
    (moved / "compile-only").mkdir(parents=True)
    for f in (cache / "compile-only").iterdir():
        (moved / "compile-only" / f.name).write_bytes(f.read_bytes())
    doc = _stage(moved, "k2")
    assert all(not c["metrics"]["compile_only"]["reused"] for c in _compile_only(doc).values())
    assert len(list(fake_worker.glob("*.start"))) == 2 * len(GROUPED)


def test_a_worker_that_leaves_half_a_document_is_a_warning_and_nothing_is_kept(
    fake_worker: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_COMPILE_GARBAGE", "1")
    doc = _stage(tmp_path / "cache", "k1")
    assert doc["status"] == "skipped"  # the stage itself went on
    assert {f["kind"] for f in doc["findings"]} == {"compile_only_unavailable"}
    assert all("not JSON" in f["message"] for f in doc["findings"])
    assert not (tmp_path / "cache" / "compile-only").exists()  # an error is never kept


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_a_worker_that_times_out_is_killed_with_the_arms_it_forked(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real worker forks one process per arm: a timeout must not leave them compiling, and
    they stay in the stage's process group, which the sandbox kills when the stage ends."""
    monkeypatch.setenv("FAKE_COMPILE_HANG", "1")
    pending = compileonly.start(GROUPED[0], cache_dir=None, key=None, timeout_s=3.0)
    pid_file = fake_worker / "arm.pid"
    deadline = time.monotonic() + 20
    while not pid_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    arm = int(pid_file.read_text())
    assert _running(arm) and os.getpgid(arm) == os.getpgid(0)
    doc = compileonly.collect(pending, cache_dir=None, key=None)
    assert doc["status"] == "error" and "timed out" in doc["reason"]
    deadline = time.monotonic() + 10
    while _running(arm) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(arm)


def test_the_timings_pass_the_pipelines_validation(fake_worker: Path, tmp_path: Path) -> None:
    doc = _stage(tmp_path / "cache", None)
    assert doc["timings"]["stage"]["ready_s"] >= 0
    assert documents.problems("determinism", doc) == []  # the stage document's contract
    result = stage_results.accepted(Stage.determinism, dict(doc), 1.0)
    assert isinstance(result, StageResult)
    assert result.timings["stage"] == doc["timings"]["stage"]
    assert set(result.timings) == {"stage", *GROUPED}
    assert {"cuda_init_s", "environment_s", "subjects_s", "compile_only_wait_s"} <= set(
        result.timings["stage"]
    )
    # a candidate's document whose timings are out of the wire's bounds: an error saying where
    swollen = {**doc, "timings": {f"s{i}": {"x_s": 1.0} for i in range(100)}}
    refused = stage_results.accepted(Stage.determinism, swollen, 1.0)
    assert isinstance(refused, str) and refused.startswith("timings")


def test_only_run_0_is_hashed_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[torch.Tensor] = []
    real = arms.digest

    def counting(t: torch.Tensor) -> str:
        hashed.append(t)
        return real(t)

    monkeypatch.setattr(arms, "digest", counting)
    monkeypatch.setattr(arms, "HOST_DEVICES", frozenset())  # these CPU tensors as a GPU's
    arm = Arm("deterministic", knob=True)
    x = torch.arange(6, dtype=torch.float32)
    for _ in range(5):
        arm.add({"out": x.clone()})
    assert len(hashed) == 1  # run 0 only; the other four compared as bytes
    assert arm.outputs["out"].digests == [real(x)] * 5
    flipped = x.clone()
    flipped[0] = -0.0  # +0.0 and -0.0: equal as numbers, different bytes
    for _ in range(2):
        arm.add({"out": flipped.clone()})
    other = x.clone()
    other[5] = 7.0
    arm.add({"out": other})
    drift = arm.outputs["out"]
    assert len(hashed) == 1  # the differing runs were told apart where they are
    assert drift.differing == 3 and len(set(drift.digests)) == 3  # run 0's, flipped's, other's
    assert drift.digests[5] == drift.digests[6] == arms.fingerprint(flipped) != drift.digests[0]
    monkeypatch.setattr(arms, "HOST_DEVICES", frozenset({"cpu"}))  # outputs in host memory
    arm.add({"out": flipped.clone()})
    assert len(hashed) == 2 and drift.digests[-1] == real(flipped)  # hashed where they are


def test_a_fingerprint_tells_bytes_apart_in_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arms, "FINGERPRINT_CHUNK", 16)  # several chunks from a small tensor
    base = torch.arange(101, dtype=torch.bfloat16)  # 202 bytes: not whole 32-bit words
    seen = {arms.fingerprint(base)}
    for i in range(base.numel()):
        changed = base.clone()
        changed.view(torch.int16)[i] ^= 1  # one bit, in each word of each chunk
        seen.add(arms.fingerprint(changed))
    swapped = base.clone()
    swapped[[3, 40]] = swapped[[40, 3]]  # the same words in other places
    seen.add(arms.fingerprint(swapped))
    assert len(seen) == base.numel() + 2
    assert arms.fingerprint(base.clone()) == arms.fingerprint(base)
    assert arms.fingerprint(base[1:]) != arms.fingerprint(base[:-1])  # an unaligned view
    assert arms.fingerprint(torch.tensor([0.0])) != arms.fingerprint(torch.tensor([-0.0]))
    assert arms.fingerprint(torch.empty(0)) != arms.fingerprint(torch.zeros(1))


def test_the_timings_reach_the_report_and_the_build_page_bounded(service: Service) -> None:
    build_id = submit_wheel(service)
    runner = register(service, "r1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    token, job = lease["lease_token"], lease["job_id"]
    timings = {
        "stage": {"ready_s": 4.2, "total_s": 20.5},
        "x": {"compile_only_s": 1.0, "reused": True},
    }
    body = stage_body(token)
    resp = runner.post(
        f"/api/jobs/{job}/stages",
        json={**body, "result": {**body["result"], "timings": {str(i): {} for i in range(40)}}},
    )
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "validation_error"
    resp = runner.post(
        f"/api/jobs/{job}/stages", json={**body, "result": {**body["result"], "timings": timings}}
    )
    assert resp.status_code == 201, resp.text
    (stage,) = report(service, build_id)["jobs"][0]["stages"]
    assert stage["timings"] == timings
    page = loopback.get(f"{service.url}/builds/{build_id}").text
    assert "where the seconds went" in page and "ready_s 4.2" in page
    assert "x: compile_only_s 1.0, reused True" in page
