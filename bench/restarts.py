"""How fast a runner restarts: SIGTERM to offline, and a build submitted right after a SIGKILL.

    .venv/bin/python bench/restarts.py [--sigterm 5] [--sigkill 2] [--json OUT]

Starts a real ``fe-ci serve`` on 127.0.0.1 (defaults: 120 s leases, no GPU families, so each
build is one CPU job) and a real ``fe-ci runner`` with its defaults (a 20 s claim long poll,
warm workers), and measures, on the wall clock:

1. SIGTERM to offline, ``--sigterm`` times: the runner idle in its long poll (a random 2-10 s
   after it registered), SIGTERM, then the time until the process exited and until the service's
   database shows the runner offline; the runner is started again for the next trial.
2. a build after SIGKILL and a restart, ``--sigkill`` times: the runner idle in its long poll,
   SIGKILL, the same runner (name, cache dir) started again at once and a build (a constructed
   wheel: install, probe, refusal) submitted right after; the time from the submission to the
   verdict, the ``409 runner_name_in_use`` answers the restarted runner got, and which attempt
   finished the job.
3. for comparison, interleaved with 2: the same after a clean restart (SIGTERM, exit, start
   again), which pays the same start of a runner process; and a build on a warm idle runner.

Prints a JSON summary (``--json`` also writes it); removes everything it wrote.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit import loopback
from testkit.service import SUBMIT, Service, service_env
from testkit.wheels import make_wheel

NAME = "bench-1"


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        data = root / "data"
        self.svc = Service(data_dir=data, env=service_env(data, FE_CI_GPU_ARCHS="")).start()
        self.cache = root / "runner-cache"
        self.runs = 0
        self.builds = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def log(self, run: int) -> Path:
        return self.root / f"runner-{run}.log"

    def start_runner(self) -> int:
        """Start the runner; the number of its log."""
        self.runs += 1
        self.proc = self.svc.start_runner(
            self.log(self.runs), FE_CI_RUNNER_NAME=NAME, FE_CI_CACHE_DIR=str(self.cache)
        )
        return self.runs

    def wait_serving(self, run: int, timeout_s: float = 600) -> None:
        """Until this run of the runner registered (or resumed) and asked for a job."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log(run).read_text() if self.log(run).exists() else ""
            if ("event=registered" in text or "event=resumed" in text) and "jobs/claim" in text:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise SystemExit(f"the runner exited: {text[-3000:]}")
            time.sleep(0.05)
        raise SystemExit(f"the runner never served: {self.log(run).read_text()[-3000:]}")

    def offline(self) -> bool:
        with sqlite3.connect(self.svc.data_dir / "fe-ci.sqlite3") as db:
            row = db.execute("SELECT offline_at FROM runners WHERE name = ?", (NAME,)).fetchone()
        return row is not None and row[0] is not None

    def build(self) -> dict[str, Any]:
        """Submit a fresh wheel and wait for its verdict."""
        self.builds += 1
        wheel = make_wheel(self.root / f"w{self.builds}", f"9.8.{self.builds}", "VALUE = 1\n")
        headers = {"Authorization": f"Bearer {SUBMIT}"}
        with loopback.client(base_url=self.svc.url, timeout=60) as http:
            t0 = time.monotonic()
            with wheel.open("rb") as fh:
                resp = http.post("/validate", files={"wheel": (wheel.name, fh)}, headers=headers)
            resp.raise_for_status()
            build_id = resp.json()["build_id"]
            while True:
                doc = http.get(f"/api/builds/{build_id}").json()
                if doc["status"] == "finished":
                    break
                if time.monotonic() - t0 > 900:
                    raise SystemExit(f"build {build_id} did not finish: {doc}")
                time.sleep(0.1)
        (job,) = doc["jobs"]
        return {
            "build_id": build_id,
            "verdict_s": round(time.monotonic() - t0, 2),
            "verdict": doc["verdict"],
            "attempt": job["attempt"],
        }

    def sigterm(self) -> dict[str, Any]:
        run = self.start_runner()
        self.wait_serving(run)
        time.sleep(random.uniform(2, 10))  # somewhere in the 20 s long poll
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        exited = offline = None
        while exited is None or offline is None:
            now = time.monotonic() - t0
            if exited is None and self.proc.poll() is not None:
                exited = now
            if offline is None and self.offline():
                offline = now
            if now > 120:
                raise SystemExit("the runner did not stop within 120 s")
            time.sleep(0.02)
        return {"exited_s": round(exited, 2), "offline_s": round(offline, 2)}

    def restart(self, sig: signal.Signals) -> dict[str, Any]:
        """The runner idle in its long poll, stopped with ``sig``, started again at once, and a
        build submitted right after."""
        run = self.start_runner()
        self.wait_serving(run)
        time.sleep(random.uniform(2, 10))
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait()
        run = self.start_runner()
        out = {"signal": sig.name, **self.build()}
        text = self.log(run).read_text()
        out["name_in_use_answers"] = text.count("event=name_in_use")
        out["resumed"] = "event=resumed" in text
        self.stop_runner()
        return out

    def stop_runner(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.svc.stop()


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sigterm", type=int, default=5, help="SIGTERM trials")
    ap.add_argument("--sigkill", type=int, default=2, help="SIGKILL (and SIGTERM) + restart trials")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fe-ci-restarts-"))
    bench = Bench(root)
    try:
        run = bench.start_runner()
        bench.wait_serving(run)
        first = bench.build()  # builds the dependency layer: not counted
        warm = bench.build()
        bench.stop_runner()
        terms = [bench.sigterm() for _ in range(args.sigterm)]
        kills, cleans = [], []
        for _ in range(args.sigkill):  # interleaved, so both meet the same load
            cleans.append(bench.restart(signal.SIGTERM))
            kills.append(bench.restart(signal.SIGKILL))
    finally:
        bench.close()
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        "first_build": first,
        "warm_idle_runner_build": warm,
        "sigterm_trials": terms,
        "sigterm_to_offline_s": spread([t["offline_s"] for t in terms]),
        "sigterm_to_exit_s": spread([t["exited_s"] for t in terms]),
        "restart_trials": [x for pair in zip(cleans, kills, strict=True) for x in pair],
        "build_after_sigterm_and_restart_s": spread([c["verdict_s"] for c in cleans]),
        "build_after_sigkill_and_restart_s": spread([k["verdict_s"] for k in kills]),
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
