"""Time to a probe verdict, against the obvious way and the floor; queue latency; throughput.

    .venv/bin/python bench/time_to_verdict.py [--version 1.32.0] [--cold 3] [--warm 2]
        [--side 3] [--latency 12] [--idle-s 60] [--builds 10000] [--load-s 5] [--json OUT]
        [--only service,side,latency,throughput,installers,bytecode]

Every figure is measured in this one run, on this machine, with the real registry wheel
(testkit/registry.py):

1. through the service: ``POST /validate`` to a real ``fe-ci serve`` on 127.0.0.1, a real
   ``fe-ci runner`` (FE_CI_GPU_ARCHS empty: one CPU job, install + probe) until the build is
   finished, split by stage from the client's clock and the service's database. ``cold`` = a
   runner with an empty cache dir (it builds the dependency layer; the installer's download cache
   is left as it is, so the network is not measured); ``warm`` = the next builds on that runner.
2. side by side, interleaved: (a) the obvious way, a fresh ``python -m venv`` and ``pip install``
   of the wheel with its dependencies, then the probe; (b) fe-ci's warm path (the pipeline's
   install and probe stages with a built layer); (c) the floor, the probe alone in an
   environment that already has the candidate.
3. queue latency: submit -> an idle runner's claim, over many submissions at random moments, and
   how many claim requests an idle runner makes per minute (from the service's access log).
4. throughput: requests/s of ``GET /api/builds/{id}`` and ``GET /`` on one uvicorn worker over
   a database of ``--builds`` builds (bench/dashboard_bench.py's filler), against a minimal
   FastAPI endpoint on the same machine (the ceiling).
5. installers: uv against pip, building a dependency layer and installing the candidate alone.
6. bytecode: the probe through a layer with bytecode against the same layer without it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.dashboard_bench import seed_database, start_service  # noqa: E402
from runner import envs, layers, pipeline, warm_install, zygotes  # noqa: E402
from runner.wire import Stage  # noqa: E402
from testkit.registry import candidate_env, registry_wheel  # noqa: E402
from testkit.service import SUBMIT as SUBMIT_TOKEN  # noqa: E402
from testkit.service import Service, free_port, service_env  # noqa: E402

SUBMIT = {"Authorization": f"Bearer {SUBMIT_TOKEN}"}
RESULTS: dict[str, object] = {}


def spread(values: list[float]) -> str:
    """``median (min-max, n=N)``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f}, n={len(values)})"


def _ts(text: str) -> float:
    when = datetime.fromisoformat(text)
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


# ---------------------------------------------------------------------------- the service path


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
        with httpx.Client(base_url=svc.url, timeout=600) as http:
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


# ---------------------------------------------------------------------------- side by side


def _probe(python: Path, work: Path) -> float:
    opts = pipeline.Options(
        stages=[Stage.probe],
        work_dir=work,
        preinstalled=True,
        candidate_python=python,
        layers_dir=None,
    )
    pipe = pipeline.Pipeline(opts)
    t = time.monotonic()
    res = pipe.probe()
    took = time.monotonic() - t
    assert res.status.value == "pass", res.reason
    return took


def obvious(wheel: Path, work: Path) -> dict[str, float]:
    """A fresh ``python -m venv`` (with pip) and ``pip install`` of the wheel, then the probe."""
    torch = envs.host_torch()
    assert torch is not None
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(work / "env")], check=True)
    env = envs.CandidateEnv(work / "env")
    # this host's torch lives in the runner's venv: one line lets the new venv see it
    (env.site_packages() / "host_torch.pth").write_text(f"{torch.site_dir}\n")
    (work / "c.txt").write_text(f"torch=={torch.version}\n")
    t1 = time.monotonic()
    extras = envs.install_extras(envs.read_wheel_metadata(wheel))
    target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    done = subprocess.run(
        [str(env.python), "-m", "pip", "install", "-q", "-c", str(work / "c.txt"), target],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if done.returncode != 0:
        raise SystemExit(f"the obvious way failed: {done.stderr[-2000:]}")
    t2 = time.monotonic()
    probe_s = _probe(env.python, work / "probe")
    return {"venv": t1 - t0, "install": t2 - t1, "probe": probe_s, "total": t2 - t0 + probe_s}


def warm_path(
    wheel: Path, work: Path, layers_dir: Path, pool: zygotes.Zygotes | None = None
) -> dict[str, float]:
    opts = pipeline.Options(
        stages=[Stage.probe], work_dir=work, layers_dir=layers_dir, zygotes=pool
    )
    pipe = pipeline.Pipeline(opts)
    t = time.monotonic()
    inst = pipe.install(wheel)
    t1 = time.monotonic()
    assert "reused" in inst.reason, inst.reason
    res = pipe.probe()
    t2 = time.monotonic()
    assert res.status.value == "pass", res.reason
    venv = re.search(r"venv ([\d.]+) s", inst.reason)
    env_s = float(venv.group(1)) if venv else 0.0
    return {
        "venv": env_s,
        "install": t1 - t - env_s,
        "probe": t2 - t1,
        "total": t2 - t,
    }


def side_by_side(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    layers_dir = tmp / "side-layers"
    preinstalled = candidate_env(wheel.name.split("-")[1]).python
    pool = zygotes.Zygotes(tmp / "side-zygotes")
    # the layer exists before the first timed warm run, and the runner's zygote for it is up
    # (a long-running runner starts it with the first build on the layer)
    pipeline.Pipeline(
        pipeline.Options(stages=[Stage.probe], work_dir=tmp / "prime", layers_dir=layers_dir)
    ).install(wheel)
    warm_path(wheel, tmp / "prime-zygote", layers_dir, pool)
    out: dict[str, list[dict]] = {"obvious": [], "warm": [], "warm+zygote": [], "floor": []}
    try:
        for rep in range(reps):
            work = tmp / f"side-{rep}"
            out["obvious"].append(obvious(wheel, work / "obvious"))
            out["warm"].append(warm_path(wheel, work / "warm", layers_dir))
            out["warm+zygote"].append(warm_path(wheel, work / "zygote", layers_dir, pool))
            floor = _probe(preinstalled, work / "floor")
            out["floor"].append({"probe": floor, "total": floor})
            shutil.rmtree(work, ignore_errors=True)
            print(
                "  " + ", ".join(f"{k} {v[-1]['total']:.2f} s" for k, v in out.items()),
                flush=True,
            )
    finally:
        pool.close()
    return out


def installers(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    """uv against pip: building the layer (download caches warm) and the candidate-only install."""
    out: dict[str, list[dict]] = {}
    for rep in range(reps):
        for name in ("uv", "pip"):
            os.environ["FE_CI_INSTALLER"] = name
            layers_dir = tmp / f"inst-{name}-{rep}"
            t = time.monotonic()
            warm_install.ensure_layer(
                envs.read_wheel_metadata(wheel), layers_dir=layers_dir, timeout_s=900
            )
            built = time.monotonic() - t
            env = envs.create_env(tmp / f"inst-env-{name}-{rep}")
            t = time.monotonic()
            warm = warm_install.install_warm(
                env, wheel, layers_dir=layers_dir, log_path=tmp / "inst.log", timeout_s=900
            )
            assert warm.outcome.ok and warm.installer == name and not warm.problems
            out.setdefault(name, []).append(
                {"layer build": built, "candidate only (+ check)": time.monotonic() - t}
            )
            print(f"  {name}: layer {built:.1f} s", flush=True)
    os.environ.pop("FE_CI_INSTALLER", None)
    return out


def bytecode(wheel: Path, tmp: Path, reps: int) -> dict[str, list[dict]]:
    """The probe through a layer with bytecode (as built now) and the same layer without it."""
    layers_dir = tmp / "bc-layers"
    layer = warm_install.ensure_layer(
        envs.read_wheel_metadata(wheel), layers_dir=layers_dir, timeout_s=900
    )
    assert layer is not None
    bare = layers.Layer(root=tmp / "bc-bare", spec=layer.spec, built_s=None)
    shutil.copytree(layer.root, bare.root, symlinks=True)
    for cache in list(bare.root.rglob("__pycache__")):
        shutil.rmtree(cache)
    pythons = {}
    for name, lay in (("layer with bytecode", layer), ("layer without bytecode", bare)):
        env = envs.create_env(tmp / f"bc-env-{len(pythons)}")
        layers.attach(env.site_packages(), lay)
        cmd = envs.install_command("uv", env, [str(wheel)], no_deps=True)
        subprocess.run(cmd, check=True, capture_output=True)
        pythons[name] = env.python
    out: dict[str, list[dict]] = {name: [] for name in pythons}
    for rep in range(reps):
        for name, python in pythons.items():
            out[name].append({"probe": _probe(python, tmp / f"bc-probe-{rep}")})
    layers.remove(bare.root)
    return out


# ---------------------------------------------------------------------------- queue latency


def wait_until_up(url: str, tries: int = 300) -> None:
    """Until ``url`` answers at all (a server just started), 0.1 s apart."""
    for _ in range(tries):
        try:
            httpx.get(url)
            return
        except httpx.TransportError:
            time.sleep(0.1)


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
        with httpx.Client(base_url=svc.url, timeout=600) as http:
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


# ---------------------------------------------------------------------------- throughput

MINIMAL_APP = """
from fastapi import FastAPI
app = FastAPI()

@app.get("/ping")
def ping() -> dict[str, bool]:
    return {"ok": True}
"""


def _hammer(args: tuple[str, str, float, bool]) -> int:
    base, path, seconds, revalidate = args
    n = 0
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(5):
            etag = client.get(path).headers.get("etag")
        headers = {"If-None-Match": etag} if revalidate and etag else {}
        expect = 304 if headers else 200
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            status = client.get(path, headers=headers).status_code
            if status != expect:
                raise RuntimeError(f"GET {path}: {status}, expected {expect}")
            n += 1
    return n


def rps(base: str, path: str, seconds: float, clients: int = 2, revalidate: bool = False) -> float:
    """Requests per second from ``clients`` processes, each one keep-alive connection.

    ``revalidate``: each request carries the ETag of the first answer (``If-None-Match``).
    """
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(clients) as pool:
        counts = pool.map(_hammer, [(base, path, seconds, revalidate)] * clients)
    return sum(counts) / seconds


def throughput(tmp: Path, builds: int, seconds: float, reps: int = 3) -> dict[str, list[float]]:
    data = tmp / "tp-data"
    ids = seed_database(data, builds)
    (tmp / "minimal_app.py").write_text(MINIMAL_APP)
    mport = free_port()
    svc = start_service(data)
    cmd = [sys.executable, "-m", "uvicorn", "minimal_app:app", "--port", str(mport)]
    cmd += ["--host", "127.0.0.1", "--workers", "1", "--no-access-log", "--log-level", "warning"]
    minimal = subprocess.Popen(cmd, cwd=tmp)
    out: dict[str, list[float]] = {}
    try:
        wait_until_up(f"http://127.0.0.1:{mport}/ping")
        report = f"/api/builds/{ids['newest_pass']}"
        targets: list[tuple[str, str, str, bool]] = [
            ("minimal FastAPI /ping (ceiling)", f"http://127.0.0.1:{mport}", "/ping", False),
            (f"GET {report}", svc.url, report, False),
            (f"GET {report} If-None-Match (304)", svc.url, report, True),
            ("GET /", svc.url, "/", False),
        ]  # fmt: skip
        for _ in range(reps):  # interleaved, so drift in the machine's load hits all alike
            for label, base, path, revalidate in targets:
                out.setdefault(label, []).append(rps(base, path, seconds, revalidate=revalidate))
    finally:
        svc.stop()
        minimal.terminate()
        minimal.wait(timeout=15)
    return out


# ---------------------------------------------------------------------------- report


def table(rows: dict[str, list[dict]], keys: list[str]) -> None:
    print("| part | " + " | ".join(rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for key in keys:
        cells = [spread([r[key] for r in v]) if v and key in v[0] else "—" for v in rows.values()]
        print(f"| {key} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", default="1.32.0")
    parser.add_argument("--cold", type=int, default=3, help="cold runners (each then --warm)")
    parser.add_argument("--warm", type=int, default=2, help="warm builds per cold runner")
    parser.add_argument("--side", type=int, default=3, help="side-by-side repetitions")
    parser.add_argument("--latency", type=int, default=12, help="submissions for queue latency")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--builds", type=int, default=10_000)
    parser.add_argument("--load-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default="service,side,latency,throughput,installers,bytecode")
    args = parser.parse_args()
    only = set(args.only.split(","))
    wheel = registry_wheel(args.version)
    print(f"wheel {wheel.name}; installer {envs.choose_installer()}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="fe-ci-ttv-") as tmp_s:
        tmp = Path(tmp_s)
        sections: list[tuple[str, Callable[[], object]]] = [
            ("service", lambda: through_service(wheel, tmp, args.cold, args.warm)),
            ("side", lambda: side_by_side(wheel, tmp, args.side)),
            ("latency", lambda: queue_latency(wheel, tmp, args.latency, args.idle_s)),
            ("throughput", lambda: throughput(tmp, args.builds, args.load_s)),
            ("installers", lambda: installers(wheel, tmp, args.side)),
            ("bytecode", lambda: bytecode(wheel, tmp, args.side)),
        ]
        for name, fn in sections:
            if name in only:
                print(f"\n## {name}", flush=True)
                RESULTS[name] = fn()
    report(args)


def report(args: argparse.Namespace) -> None:
    print("\n# results: median (min-max, n) in seconds\n")
    svc = RESULTS.get("service")
    if isinstance(svc, dict):
        keys = [k for k in svc["cold"][0] if not k.startswith("_")]
        table(svc, keys)
    side = RESULTS.get("side")
    if isinstance(side, dict):
        print()
        table(side, ["venv", "install", "probe", "total"])
        med = {k: statistics.median(r["total"] for r in v) for k, v in side.items()}
        print(f"\nobvious / warm path: {med['obvious'] / med['warm']:.1f}x")
        print(f"warm path / floor: {med['warm'] / med['floor']:.2f}x")
        print(f"obvious / warm path with its zygote: {med['obvious'] / med['warm+zygote']:.1f}x")
        print(f"warm path with its zygote / floor: {med['warm+zygote'] / med['floor']:.2f}x")
        if isinstance(svc, dict):
            key = "probe verdict stored (from POST)"
            warm_total = statistics.median(r[key] for r in svc["warm"])
            ratio = med["obvious"] / warm_total
            print(f"obvious / warm probe verdict through the service: {ratio:.1f}x")
            floor = warm_total / med["floor"]
            print(f"warm probe verdict through the service / floor: {floor:.2f}x")
    inst = RESULTS.get("installers")
    if isinstance(inst, dict):
        print()
        table(inst, ["layer build", "candidate only (+ check)"])
    bc = RESULTS.get("bytecode")
    if isinstance(bc, dict):
        print()
        table(bc, ["probe"])
    lat = RESULTS.get("latency")
    if isinstance(lat, dict):
        values = lat["latency_s"]
        assert isinstance(values, list)
        print(f"\nqueue latency (202 -> claimed), s: {spread(values)}")
        print(f"over 1 s: {sum(v > 1.0 for v in values)} of {len(values)}")
        print(f"idle runner: {lat['idle_claims_per_min']:.1f} claim requests per minute")
    tp = RESULTS.get("throughput")
    if isinstance(tp, dict):
        print("\n| endpoint | requests/s median (min-max) | / ceiling |\n|---|---:|---:|")
        ceiling = statistics.median(next(iter(tp.values())))
        for label, values in tp.items():
            med = statistics.median(values)
            print(
                f"| {label} | {med:.0f} ({min(values):.0f}-{max(values):.0f}) "
                f"| {med / ceiling:.2f} |"
            )
    if args.json:
        args.json.write_text(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    main()
