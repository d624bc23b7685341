"""How soon a runner long-polling one service replica takes a job submitted to another.

    .venv/bin/python bench/replica_wake.py [--trials 10] [--json OUT]

Starts a throwaway PostgreSQL server (``testkit/postgres.py``) and two real ``fe-ci serve``
processes on it (replicas A and B, on 127.0.0.1), registers a builder runner on A, and for each
trial: the runner's claim long-polls A (``wait_s`` 30), a commit build is submitted (to B, or to
A for comparison) once the claim has looked at the empty queue and waits, and the time from the
submission's answer to the claim's answer is taken on the wall clock; the job is then given
back ended. Without the wake-up across replicas (``service/jobs/wake.py``) the claim on A would
find B's job only at its next look at the queue.

Prints a JSON summary (``--json`` also writes it); removes everything it wrote.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from sqlalchemy import Engine, create_engine, text

from testkit import loopback
from testkit.postgres import find_bindir, running
from testkit.service import REGISTER, Service, service_env
from testkit.waiting import eventually


def _register(svc: Service) -> httpx.Client:
    resp = loopback.post(
        f"{svc.url}/api/runners/register",
        json={"name": "builder-a", "labels": {"builder": "1"}},
        headers={"Authorization": f"Bearer {REGISTER}"},
    )
    resp.raise_for_status()
    return svc.http(resp.json()["token"])


def _seen(engine: Engine) -> object:
    with engine.connect() as conn:
        return conn.execute(text("SELECT last_seen_at FROM runners")).scalar()


def _trial(runner: httpx.Client, engine: Engine, target: Service, sha: str) -> float:
    answer: dict[str, Any] = {}

    def claim() -> None:
        resp = runner.post("/api/jobs/claim", json={"wait_s": 30})
        answer["at"], answer["resp"] = time.monotonic(), resp

    before = _seen(engine)
    poll = threading.Thread(target=claim)
    poll.start()  # once it marked its runner seen, the claim looked at the queue and waits
    eventually(lambda: _seen(engine) != before, timeout=30, message="the claim waiting")
    with target.http() as http:
        http.post("/validate", json={"commit": sha}).raise_for_status()
    submitted = time.monotonic()
    poll.join()
    resp = answer["resp"]
    assert resp.status_code == 200, resp.text
    lease = resp.json()
    done = {"lease_token": lease["lease_token"], "error": "bench: given back"}
    runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done)
    return float(answer["at"] - submitted)


def _summary(seconds: list[float]) -> dict[str, float | int]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "min_ms": round(min(ms), 1),
        "max_ms": round(max(ms), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bindir = find_bindir()
    if bindir is None:
        print("no PostgreSQL server binaries (initdb, pg_ctl); scripts/setup installs them")
        return 2
    work = Path(tempfile.mkdtemp(prefix="fe-ci-bench-"))
    replicas: list[Service] = []
    try:
        with running(bindir) as pg:
            url = pg.create_database()
            for name in ("a", "b"):
                data = work / name
                env = service_env(data, FE_CI_DATABASE_URL=url)
                replicas.append(Service(data_dir=data, env=env).start())
            a, b = replicas
            for svc in replicas:
                eventually(lambda s=svc: "event=wake_listening" in s.log_path.read_text())
            runner = _register(a)
            engine = create_engine(url)
            results: dict[str, Any] = {}
            for label, target, first in (("other_replica", b, "b"), ("same_replica", a, "a")):
                shas = (f"{first}{i:039x}" for i in range(args.trials))
                results[label] = _summary([_trial(runner, engine, target, sha) for sha in shas])
            engine.dispose()
            for svc in replicas:
                svc.stop()
    finally:
        for svc in replicas:
            svc.stop()
        shutil.rmtree(work, ignore_errors=True)
    out = json.dumps(results, indent=2)
    print(out)
    if args.json:
        args.json.write_text(out + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
