"""Builds through the service and a GPU runner, one after another: what a second build costs.

    python bench/gpu_builds.py --wheel W [--wheel W ...] --out DIR [--port 8089] [--state DIR]

Starts a real ``fe-ci serve`` (SQLite in a temp dir, ``FE_CI_GPU_ARCHS`` = this GPU's family), a
real ``fe-ci runner`` on this host and a CPU runner beside it (``--one-runner``: none), as the
compose file deploys a GPU host (``FE_CI_WHEELHOUSE`` from the environment, as on an offline GPU
host), submits each wheel with ``POST /validate`` in the order given, waits for each build to
finish before the next, and writes for each build its report (``build-N.json``, as
``GET /api/builds/N`` answers it) and one summary (``summary.json`` and ``summary.txt``): wall
time from submission to the finished report, each job's stage durations, and for the determinism
stage per subject the config it started from and the one it used, escalation steps, compile and
run seconds, the control arm's drift, the luck probability, bit identity against the previous build
and the cost of determinism, as far as the report carries them. Same wheel twice = cold, then warm;
a re-labelled copy of it = a different wheel whose kernel sources did not change.

Needs a CUDA GPU; the service and the runner run from this checkout (``python -m cli.main``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit import loopback  # noqa: E402

SUBMIT = "bench-submit-token"
REGISTER = "bench-runner-token"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_") or k in _KEEP}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)
    return env


_KEEP = {"FE_CI_WHEELHOUSE", "FE_CI_INDEX_URL", "FE_CI_MATRIX"}


def gpu_family() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(*torch.cuda.get_device_capability())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    major, minor = int(out[0]), int(out[1])
    return "sm_100" if major == 10 else f"sm_{major}{minor}"


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *argv],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def wait_up(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the service exited:\n{log.read_text()[-4000:]}")
        try:
            if loopback.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit("the service did not come up")


def run_build(http: httpx.Client, wheel: Path, timeout_s: float) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    with wheel.open("rb") as fh:
        resp = http.post(
            "/validate",
            files={"wheel": (wheel.name, fh)},
            headers={"Authorization": f"Bearer {SUBMIT}"},
        )
    resp.raise_for_status()
    build_id = int(resp.json()["build_id"])
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        doc = http.get(f"/api/builds/{build_id}").json()
        if doc["status"] == "finished":
            return doc, time.monotonic() - t0
        time.sleep(0.5)
    raise SystemExit(f"build {build_id} did not finish in {timeout_s:.0f} s")


def summarise(doc: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """The figures of one build report that this benchmark is about."""
    jobs = []
    for job in doc.get("jobs", []):
        stages = {
            s["name"]: [s["status"], round(s.get("duration_s") or 0.0, 2)] for s in job["stages"]
        }
        det = next((s for s in job["stages"] if s["name"] == "determinism"), None)
        subjects: dict[str, Any] = {}
        if det is not None:
            for key in ("timings", "subjects", "escalation", "memory"):
                if det.get(key):
                    subjects[key] = det[key]
            subjects["reason"] = det.get("reason")  # ends with the compile cache's entries
            for check in det.get("checks", []):
                m = check.get("metrics") or {}
                subjects.setdefault("checks", []).append(
                    {
                        "name": check.get("name"),
                        "status": check.get("status"),
                        "config": (m.get("config") or {}).get("name"),
                        "start": m.get("start"),  # remembered config, build, kept/escalated
                        "escalation_steps": m.get("escalation_steps"),
                        "compile_s": m.get("compile_s"),
                        "run_s": m.get("run_s"),
                    }
                )
        jobs.append(
            {
                "kind": job.get("kind"),
                "family": job.get("family"),
                "environment": job.get("environment"),
                "stages": stages,
                "determinism": subjects,
            }
        )
    drift = [
        {
            k: d.get(k)
            for k in (
                "subject",
                "output",
                "arm",
                "runs",
                "differing",
                "max_abs_diff",
                "luck_probability",
                "stopped_by",
                "config",
            )
        }
        for d in doc.get("drift", [])
    ]
    return {
        "id": doc["id"],
        "version": doc.get("version"),
        "sha256": doc.get("sha256"),
        "verdict": doc.get("verdict"),
        "verdict_reason": doc.get("verdict_reason"),
        "wall_s": round(wall_s, 2),
        "jobs": jobs,
        "drift": drift,
        "findings": [
            {k: f.get(k) for k in ("kind", "severity", "subject", "message")}
            for f in doc.get("findings", [])
        ],
        # bit identity and the cost of determinism against the previous comparable build
        "history": doc.get("history", []),
    }


def _seconds(phases: dict[str, Any]) -> str:
    return ", ".join(
        f"{k.removesuffix('_s')} {v} s" if k.endswith("_s") else f"{k} {v}"
        for k, v in phases.items()
    )


def phase_lines(timings: dict[str, Any]) -> list[str]:
    """The determinism stage's ``timings``: the stage's own phases, then each subject's."""
    lines = []
    if stage := timings.get("stage"):
        lines.append(f"  determinism stage: {_seconds(stage)}")
    for name, phases in timings.items():
        if name != "stage":
            lines.append(f"  {name} phases: {_seconds(phases)}")
    return lines


def text(summary: dict[str, Any]) -> str:
    lines = [
        f"build {summary['id']} {summary['version']} sha256 {str(summary['sha256'])[:12]}: "
        f"{summary['verdict']} in {summary['wall_s']} s ({summary['verdict_reason']})"
    ]
    for job in summary["jobs"]:
        stages = ", ".join(f"{n} {st} {s} s" for n, (st, s) in job["stages"].items())
        lines.append(f"  {job['kind']} {job['family'] or ''}: {stages}")
    for job in summary["jobs"]:
        for c in job["determinism"].get("checks", []):
            start = c.get("start") or {}
            lines.append(
                f"  {c['name']} {c['status']} at {c['config']}: start {start.get('config')} "
                f"(build {start.get('build_id')}, {start.get('outcome')}), "
                f"{c['escalation_steps']} escalation steps, compile {c['compile_s']} s, "
                f"runs {c['run_s']} s"
            )
    for job in summary["jobs"]:
        lines += phase_lines(job["determinism"].get("timings") or {})
    for d in summary["drift"]:
        lines.append(
            f"  {d['subject']}.{d['output']} {d['arm']}: {d['differing']}/{d['runs']} differ, "
            f"max|d| {d['max_abs_diff']}, luck {d['luck_probability']}, "
            f"config {(d['config'] or {}).get('name')}"
        )
    for h in summary.get("history", []):
        prev = f"build {h['previous_build_id']}" if h["previous_build_id"] else "no earlier build"
        changed = ", ".join(f"{o} max|d| {d}" for o, d in (h["changed"] or {}).items())
        cost = f"{h['cost_ratio']:.3f}x" if h["cost_ratio"] is not None else "?"
        was = f"{h['previous_cost_ratio']:.3f}x" if h["previous_cost_ratio"] is not None else "-"
        lines.append(
            f"  bits {h['family']} {h['subject']} at {h['config']}: {h['bits']} vs {prev}"
            f"{' (' + changed + ')' if changed else ''}; cost of determinism {cost} "
            f"({h['timer']}), previous {was}{' REGRESSED' if h['cost_regressed'] else ''}"
        )
    for f in summary["findings"]:
        lines.append(f"  finding {f['severity']} {f['kind']} {f['subject'] or ''}: {f['message']}")
    return "\n".join(lines)


@contextlib.contextmanager
def stack(
    state: Path,
    logs: Path,
    port: int,
    family: str,
    cpu_runner: bool = True,
    **runner_env: str,
) -> Iterator[httpx.Client]:
    """A real ``fe-ci serve`` (its data under ``state/data``), one ``fe-ci runner`` (its caches
    under ``state/runner-cache``) and, with ``cpu_runner``, a second one beside it that offers no
    GPU (``arch=none``, the GPU hidden; caches under ``state/cpu-runner-cache``), as the compose
    file's builder is on a GPU host: a build's CPU job runs while its GPU job does. Logs appended
    in ``logs``; a client of the service while they run; all stopped (SIGTERM, then SIGKILL
    after 30 s) however the block ends."""
    url = f"http://127.0.0.1:{port}"
    svc_log = logs / "service.log"
    service = start(
        ["serve", "--port", str(port)],
        _env(
            FE_CI_DATA_DIR=str(state / "data"),
            FE_CI_SUBMIT_TOKEN=SUBMIT,
            FE_CI_RUNNER_TOKEN=REGISTER,
            FE_CI_WEBHOOK_SECRET="bench-webhook-secret",
            FE_CI_ADMIN_TOKEN="bench-admin-token",
            FE_CI_GPU_ARCHS=family,
        ),
        svc_log,
    )
    runners: list[subprocess.Popen[bytes]] = []
    try:
        wait_up(url, service, svc_log)
        own = {"FE_CI_URL": url, "FE_CI_RUNNER_TOKEN": REGISTER, **runner_env}
        runners.append(
            start(
                ["runner"],
                _env(
                    FE_CI_RUNNER_NAME="bench-gpu",
                    FE_CI_CACHE_DIR=str(state / "runner-cache"),
                    **own,
                ),
                logs / "runner.log",
            )
        )
        if cpu_runner:
            runners.append(
                start(
                    ["runner"],
                    _env(
                        FE_CI_RUNNER_NAME="bench-cpu",
                        FE_CI_RUNNER_LABELS="arch=none",
                        CUDA_VISIBLE_DEVICES="",
                        FE_CI_CACHE_DIR=str(state / "cpu-runner-cache"),
                        **own,
                    ),
                    logs / "cpu-runner.log",
                )
            )
        with loopback.client(base_url=url, timeout=120) as http:
            yield http
    finally:
        for proc in (*runners, service):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", action="append", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument(
        "--keep-db", action="store_true", help="copy the service's SQLite database into --out"
    )
    parser.add_argument(
        "--family", help="GPU families to cover (default: this GPU's); '' for a CPU job alone"
    )
    parser.add_argument(
        "--one-runner",
        action="store_true",
        help="no CPU runner beside the GPU one: a build's CPU job waits for its GPU job",
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="the service's data and the runner's caches here, kept (e.g. a stream's --state, "
        "whose caches are warm) instead of in a new temporary folder",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as keep:
        if args.state is None:
            work = Path(keep.enter_context(tempfile.TemporaryDirectory(prefix="fe-ci-gpu-bench-")))
            runner_env = {}
        else:
            work = args.state
            work.mkdir(parents=True, exist_ok=True)
            runner_env = {"FE_CI_RUNNER_REPLACE": "1"}  # an earlier call's runner had the name
        family = gpu_family() if args.family is None else args.family
        with stack(
            work, args.out, args.port, family, cpu_runner=not args.one_runner, **runner_env
        ) as http:
            summaries = []
            for wheel in args.wheel:
                doc, wall = run_build(http, wheel, args.timeout_s)
                (args.out / f"build-{doc['id']}.json").write_text(json.dumps(doc, indent=1))
                summaries.append(summarise(doc, wall))
                print(text(summaries[-1]), flush=True)
        (args.out / "summary.json").write_text(json.dumps(summaries, indent=1))
        (args.out / "summary.txt").write_text("\n\n".join(text(s) for s in summaries) + "\n")
        if args.keep_db:  # the service's database, to show these builds' pages elsewhere
            db = sqlite3.connect(work / "data" / "fe-ci.sqlite3")
            db.execute("VACUUM INTO ?", (str(args.out / "fe-ci.sqlite3"),))
            db.close()


if __name__ == "__main__":
    main()
