"""An sm_90 GPU job's stages and wall time with and without its refusal stage, on CPU.

    .venv/bin/python bench/refusal_reuse.py [--version 1.32.0] [--builds 3] [--cpu-runner]
        [--json OUT]

A real ``fe-ci serve`` on 127.0.0.1 (``FE_CI_GPU_ARCHS=sm_90``) and one real ``fe-ci runner``
labelled ``arch=sm_90`` (no GPU here: the determinism stage finds none and says so, as on any
host without one; the refusal stage is the real one, every row an intercepted decision). Each
build is the registry wheel; the runner takes the CPU job, then the sm_90 job. The first build
warms the runner's layer and is not counted. Per counted build: the GPU job's stage list, each
stage's seconds, the job's wall (claim to finish, from the service's database) and the build's
(submission to finished report, from this client's clock).

``--cpu-runner`` starts a second runner beside it, labelled ``arch=none`` (a CPU runner on a GPU
host, as the compose file's builder is): it takes the CPU job while the first runs the sm_90 job,
and the build's wall is the longer job's instead of their sum.

Run it from a checkout to measure that checkout (``PYTHONPATH`` and the processes follow this
file's directory), e.g. the commit before the reuse in a ``git worktree`` for the "before".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit import loopback  # noqa: E402
from testkit.registry import registry_wheel  # noqa: E402
from testkit.service import Service, service_env  # noqa: E402


def _build(svc: Service, wheel: Path, timeout_s: float) -> dict[str, Any]:
    start = time.monotonic()
    with svc.http() as http, wheel.open("rb") as fh:
        resp = http.post("/validate", files={"wheel": (wheel.name, fh)})
    resp.raise_for_status()
    build_id = int(resp.json()["build_id"])
    while time.monotonic() - start < timeout_s:
        doc = loopback.get(f"{svc.url}/api/builds/{build_id}").json()
        if doc["status"] == "finished":
            break
        time.sleep(0.2)
    else:
        raise TimeoutError(f"build {build_id} did not finish in {timeout_s} s")
    wall = time.monotonic() - start
    gpu = next(j for j in doc["jobs"] if j["kind"] == "gpu")
    with svc.db() as conn:
        started, finished = conn.execute(
            "SELECT started_at, finished_at FROM jobs WHERE id = ?", (gpu["id"],)
        ).fetchone()
    job_wall = (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()
    with svc.db() as conn:
        took = dict(
            conn.execute(
                "SELECT jobs.kind, runners.name FROM jobs JOIN runners ON runners.id = "
                "jobs.runner_id WHERE jobs.build_id = ?",
                (build_id,),
            ).fetchall()
        )
    return {
        "build": build_id,
        "runner_of": took,
        "verdict": doc["verdict"],
        "build_wall_s": round(wall, 2),
        "gpu_job_wall_s": round(job_wall, 2),
        "gpu_stages": [(s["name"], s["status"], s["duration_s"]) for s in gpu["stages"]],
        "refusal_reason": next(
            (s["reason"] for s in gpu["stages"] if s["name"] == "refusal"), None
        ),
        "refusal_rows_by_job": sorted({r["job_id"] for r in doc["refusal"]}),
        "refusal_rows": len(doc["refusal"]),
        "errors": [
            f"{j['kind']} {s['name']}: {s['reason']}"
            for j in doc["jobs"]
            for s in j["stages"]
            if s["status"] == "error"
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", default="1.32.0")
    ap.add_argument("--builds", type=int, default=3)
    ap.add_argument("--cpu-runner", action="store_true", help="a CPU runner beside the sm_90 one")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    wheel = registry_wheel(args.version)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        svc = Service(data_dir=data, env=service_env(data, FE_CI_GPU_ARCHS="sm_90")).start()
        runner = svc.start_runner(
            Path(tmp) / "runner.log",
            FE_CI_RUNNER_NAME="fake-h200",
            FE_CI_RUNNER_LABELS="arch=sm_90",
            FE_CI_CLAIM_WAIT_S="1",
            FE_CI_POLL_INTERVAL_S="0.2",
        )
        runners = [runner]
        if args.cpu_runner:
            runners.append(
                svc.start_runner(
                    Path(tmp) / "cpu-runner.log",
                    FE_CI_RUNNER_NAME="cpu-beside",
                    FE_CI_RUNNER_LABELS="arch=none",
                    FE_CI_CLAIM_WAIT_S="1",
                    FE_CI_POLL_INTERVAL_S="0.2",
                )
            )
        try:
            for _ in runners:  # warms each runner's layer (each takes a job of the build)
                _build(svc, wheel, 900)
            runs = [_build(svc, wheel, 600) for _ in range(args.builds)]
        finally:
            for proc in runners:
                proc.terminate()
                proc.wait(60)
            svc.stop()
    for r in runs:
        print(json.dumps(r))
    for key in ("gpu_job_wall_s", "build_wall_s"):
        values = [r[key] for r in runs]
        print(f"{key}: median {statistics.median(values):.2f} ({min(values)}-{max(values)})")
    if args.json:
        args.json.write_text(json.dumps({"root": str(ROOT), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
