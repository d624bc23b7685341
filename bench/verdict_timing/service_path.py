"""A build through a real ``fe-ci serve`` and ``fe-ci runner`` on 127.0.0.1, split by stage from
the client's clock and the service's database; and the queue latency of an idle runner."""

from __future__ import annotations

import random
import re
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench.dashboard_bench import start_service
from testkit import loopback
from testkit.service import SUBMIT as SUBMIT_TOKEN
from testkit.service import Service, service_env

SUBMIT = {"Authorization": f"Bearer {SUBMIT_TOKEN}"}


def _ts(text: str) -> float:
    when = datetime.fromisoformat(text)
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def start_runner(svc: Service, cache: Path, log: Path, name: str) -> subprocess.Popen[bytes]:
    return svc.start_runner(log, FE_CI_RUNNER_NAME=name, FE_CI_CACHE_DIR=str(cache))


def submit(http: httpx.Client, wheel: Path) -> tuple[int, float, float]:
    """(build id, time before the POST, time the 202 arrived)."""
    t0 = time.time()
    with wheel.open("rb") as fh:
        resp = http.post("/validate", files={"wheel": (wheel.name, fh)}, headers=SUBMIT)
    resp.raise_for_status()
    return int(resp.json()["build_id"]), t0, time.time()


def wait_finished(http: httpx.Client, build_id: int, timeout_s: float = 900) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc = http.get(f"/api/builds/{build_id}").json()
        if doc["status"] == "finished":
            stages = {s["name"]: s["status"] for j in doc["jobs"] for s in j["stages"]}
            if stages.get("probe") != "pass":
                raise SystemExit(f"build {build_id}: {stages} {doc['jobs']}")
            return time.time()
        time.sleep(0.02)
    raise SystemExit(f"build {build_id} did not finish")


def split(db: Path, build_id: int, t0: float, t_up: float, t_done: float) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        started, finished = conn.execute(
            "SELECT started_at, finished_at FROM jobs WHERE build_id = ?", (build_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT s.name, s.duration_s, s.created_at, s.reason FROM stages s "
            "JOIN jobs j ON j.id = s.job_id WHERE j.build_id = ?",
            (build_id,),
        ).fetchall()
    stages = {name: (dur, _ts(at), reason) for name, dur, at, reason in rows}
    inst_s, inst_at, inst_reason = stages.pop("install")
    probe_s, probe_at, _ = stages.pop("probe")
    venv = re.search(r"venv ([\d.]+) s", inst_reason)
    env_s = float(venv.group(1)) if venv else 0.0
    claimed = _ts(started)
    out = {
        "upload": t_up - t0,
        "queue wait": claimed - t_up,
        "claim to install (wheel download, job dir)": inst_at - inst_s - claimed,
        "environment (venv)": env_s,
        "install": inst_s - env_s,
        "probe": probe_s,
        "probe verdict stored (from POST)": probe_at - t0,
    }
    last = probe_at
    for name, (dur, at, _) in sorted(stages.items(), key=lambda kv: kv[1][1]):
        out[f"{name} (the rest of the CPU job)"] = dur
        last = at
    out["report (finish, seen by the client)"] = t_done - last
    out["build finished (from POST)"] = t_done - t0
    out["_finished_lag"] = _ts(finished) - last
    return out


def through_service(wheel: Path, tmp: Path, cold: int, warm: int) -> dict[str, list[dict]]:
    data = tmp / "svc-data"
    data.mkdir()
    svc = start_service(data)
    out: dict[str, list[dict]] = {"cold": [], "warm": []}
    try:
        with loopback.client(base_url=svc.url, timeout=600) as http:
            for rep in range(cold):
                cache = tmp / f"runner-cache-{rep}"
                runner = start_runner(svc, cache, tmp / "runner.log", "b1")
                try:
                    time.sleep(3)  # registered and idle in its long poll
                    for kind in ["cold"] + ["warm"] * warm:
                        build_id, t0, t_up = submit(http, wheel)
                        t_done = wait_finished(http, build_id)
                        row = split(data / "fe-ci.sqlite3", build_id, t0, t_up, t_done)
                        out[kind].append(row)
                        print(f"  {kind}: {row['build finished (from POST)']:.2f} s", flush=True)
                finally:
                    runner.terminate()
                    runner.wait(timeout=60)
    finally:
        svc.stop()
    return out


def queue_latency(wheel: Path, tmp: Path, n: int, idle_s: float) -> dict[str, object]:
    data = tmp / "lat-data"
    data.mkdir()
    # the same application as ``fe-ci serve``, with uvicorn's access log on: it counts the claims
    cmd = [sys.executable, "-m", "uvicorn", "service.app:create_app", "--factory"]
    cmd += ["--host", "127.0.0.1", "--port", "{port}", "--workers", "1"]
    svc = Service(data_dir=data, env=service_env(data), command=cmd).start()
    log = svc.log_path
    runner = start_runner(svc, tmp / "lat-cache", tmp / "lat-runner.log", "lat1")
    lat: list[float] = []
    try:
        with loopback.client(base_url=svc.url, timeout=600) as http:
            time.sleep(3)
            build_id, _, _ = submit(http, wheel)  # builds the layer: later jobs are short
            wait_finished(http, build_id)
            rng = random.Random(8)
            for _ in range(n):
                # land anywhere in the idle runner's cycle: a 20 s long poll, then a short pause
                time.sleep(rng.uniform(0.0, 24.0))
                build_id, _, t_up = submit(http, wheel)
                wait_finished(http, build_id)
                with sqlite3.connect(data / "fe-ci.sqlite3") as conn:
                    (started,) = conn.execute(
                        "SELECT started_at FROM jobs WHERE build_id = ?", (build_id,)
                    ).fetchone()
                lat.append(_ts(started) - t_up)
            before = log.read_text().count("/api/jobs/claim")
            time.sleep(idle_s)
            claims = log.read_text().count("/api/jobs/claim") - before
    finally:
        runner.terminate()
        runner.wait(timeout=60)
        svc.stop()
    return {"latency_s": lat, "idle_claims_per_min": claims * 60.0 / idle_s}
