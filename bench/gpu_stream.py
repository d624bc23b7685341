"""A stream of builds through the service and a GPU runner: genuine ones and planted ones.

    python bench/gpu_stream.py --wheel W --state DIR --out docs/measurements [--builds N]
        [--plan G,G,G,G,B,...] [--budget-s 540] [--date YYYY-MM-DD]
    python bench/gpu_stream.py --summarise docs/measurements/GPU-stream-DATE.json

Resumable: every call starts a real ``fe-ci serve`` and ``fe-ci runner`` (bench/gpu_builds.py) on
the same state directory (the service's SQLite and blobs, the runner's caches, ``stream.json``:
the plan and what ran), submits the next builds of the plan one after another (at most
``--builds``, and none it could not finish within ``--budget-s``), and stops both. A call of at
most 10 minutes therefore adds a few builds; the next call, on the same warm machine, goes on.

The plan is letters: ``G`` the genuine wheel, ``B`` it with ``flipped_bit`` planted, ``S`` with
``slower_backward`` (``testkit/plants.py``), ``T`` with ``cudnn.sdpa_torch``'s dense backward no
longer passing the torch flag (cudnn-frontend #837, ``testkit/flag_plant.py``), ``K`` with
``indexer_top_k``'s kernel compiled without its knob (``testkit/knob_plant.py``), ``P`` with
``cudnn.torch``'s SDPA backward no longer passing the flag (the same bug in the provider). Each
call writes
``GPU-stream-DATE.json``, GPU the card's model (``h200``, ``h100``: ``gpu_model``), holding
``{"builds": [the API's reports in build order], "planted": {"<id>": "what"}, "wall_s": {"<id>":
s}}``, and its summary ``.txt`` into ``--out``: a comparison
lost after build 1, pinned configs per subject, planted builds flagged or not, genuine builds
flagged, the genuine builds' verdicts, the warm determinism stage's median, and where a warm
build's time went.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gpu_builds import SUBMIT, gpu_family, stack  # noqa: E402
from testkit.flag_plant import (  # noqa: E402
    DROPPED_FLAG,
    DROPPED_PROVIDER_FLAG,
    plant_dropped_flag,
    plant_dropped_provider_flag,
)
from testkit.knob_plant import DROPPED_KNOB, plant_dropped_knob  # noqa: E402
from testkit.plants import PLANTS, plant  # noqa: E402
from testkit.streams import host_sample  # noqa: E402

DEFAULT_PLAN = "G,G,G,G,B,G,G,G,S,G,G,G,B,G,G,G,S,G,G,G"  # 20 builds
KINDS = {
    **{"G": "genuine", "B": "flipped_bit", "S": "slower_backward"},
    **{"T": "dropped_flag", "K": "dropped_knob", "P": "dropped_provider_flag"},
}


def load_state(state: Path, plan: str, wheel: Path) -> dict[str, Any]:
    path = state / "stream.json"
    if path.is_file():
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    letters = [p.strip().upper() for p in plan.split(",") if p.strip()]
    bad = [p for p in letters if p not in KINDS]
    if bad:
        raise SystemExit(f"unknown plan letters {bad}; use {', '.join(KINDS)}")
    wheels = {"genuine": str(wheel)}
    for kind in PLANTS:
        wheels[kind] = str(plant(wheel, kind, state / "wheels" / kind))
    wheels["dropped_flag"] = str(plant_dropped_flag(wheel, state / "wheels" / "dropped_flag"))
    wheels["dropped_knob"] = str(plant_dropped_knob(wheel, state / "wheels" / "dropped_knob"))
    provider = plant_dropped_provider_flag(wheel, state / "wheels" / "dropped_provider_flag")
    wheels["dropped_provider_flag"] = str(provider)
    return {"plan": [KINDS[p] for p in letters], "wheels": wheels, "done": [], "pending": None}


def save_state(state: Path, doc: dict[str, Any]) -> None:
    tmp = state / "stream.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(state / "stream.json")


def submit(http: httpx.Client, wheel: Path) -> int:
    with wheel.open("rb") as fh:
        resp = http.post(
            "/validate",
            files={"wheel": (wheel.name, fh)},
            headers={"Authorization": f"Bearer {SUBMIT}"},
        )
    resp.raise_for_status()
    return int(resp.json()["build_id"])


def wait_finished(http: httpx.Client, build_id: int, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc: dict[str, Any] = http.get(f"/api/builds/{build_id}").json()
        if doc["status"] in ("finished", "cancelled"):
            return doc
        time.sleep(0.5)
    raise SystemExit(f"build {build_id} did not finish in {timeout_s:.0f} s; call again to resume")


def run_calls(args: argparse.Namespace) -> dict[str, Any]:
    """This call's builds: the next ones of the plan, within the budget."""
    began = time.monotonic()
    args.state.mkdir(parents=True, exist_ok=True)
    doc = load_state(args.state, args.plan, args.wheel)
    # the previous call's runner is gone: its name is taken over
    with stack(
        args.state,
        args.state,
        args.port,
        gpu_family(),
        cpu_runner=not args.one_runner,
        FE_CI_RUNNER_REPLACE="1",
    ) as http:
        added = 0
        while True:
            if doc["pending"] is None:
                done = len(doc["done"])
                recent = [d["wall_s"] for d in doc["done"][1:]][-3:]  # warm builds
                expect = max(recent) * 1.3 if recent else 150.0
                spent = time.monotonic() - began
                if done >= len(doc["plan"]) or added >= args.builds:
                    break
                if spent + expect > args.budget_s:
                    print(f"stopping: {spent:.0f} s spent, the next build may take {expect:.0f} s")
                    break
                kind = doc["plan"][done]
                build_id = submit(http, Path(doc["wheels"][kind]))
                doc["pending"] = {"build": build_id, "kind": kind, "submitted": time.time()}
                save_state(args.state, doc)
            pending = doc["pending"]
            remaining = args.budget_s - (time.monotonic() - began)
            report = wait_finished(http, pending["build"], max(remaining, 30.0))
            wall = round(time.time() - pending["submitted"], 2)
            done_row = {"build": pending["build"], "kind": pending["kind"], "wall_s": wall}
            doc["done"].append({**done_row, "host": host_sample()})
            doc["pending"] = None
            save_state(args.state, doc)
            added += 1
            print(f"build {pending['build']} ({pending['kind']}): {report['verdict']} in {wall} s")
        builds = [http.get(f"/api/builds/{d['build']}").json() for d in doc["done"]]
        pins = http.get("/api/pins").json()["items"]
    what = {**PLANTS, "dropped_flag": DROPPED_FLAG, "dropped_knob": DROPPED_KNOB,
            "dropped_provider_flag": DROPPED_PROVIDER_FLAG}  # fmt: skip
    planted = {str(d["build"]): what[d["kind"]] for d in doc["done"] if d["kind"] in what}
    walls = {str(d["build"]): d["wall_s"] for d in doc["done"]}
    hosts = {str(d["build"]): d["host"] for d in doc["done"] if "host" in d}
    return {"builds": builds, "planted": planted, "wall_s": walls, "host": hosts, "pins": pins}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, help="the genuine wheel (1.32.0 for this host)")
    parser.add_argument("--state", type=Path, help="kept between calls: service, runner, plan")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "measurements")
    parser.add_argument("--builds", type=int, default=1000, help="at most this many this call")
    parser.add_argument("--plan", default=DEFAULT_PLAN)
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument(
        "--one-runner",
        action="store_true",
        help="no CPU runner beside the GPU one (the streams up to h200-stream-2026-12-05 had none)",
    )
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--summarise", type=Path, help="only summarise an earlier stream's JSON")
    args = parser.parse_args()
    from testkit.streams import summary_text

    if args.summarise is not None:
        print(summary_text(json.loads(args.summarise.read_text())))
        return
    if args.wheel is None or args.state is None:
        parser.error("--wheel and --state are needed to run builds")
    result = run_calls(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"{gpu_model()}-stream-{args.date}"
    out = {k: result[k] for k in ("builds", "planted", "wall_s", "host")}
    stem.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    text = summary_text(out, pins=result["pins"])
    stem.with_suffix(".txt").write_text(text + "\n")
    print(text)


def gpu_model() -> str:
    """The GPU's model as the files are named: ``NVIDIA H100 80GB HBM3`` -> ``h100``."""
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return found.group(1).lower() if found else "gpu"


if __name__ == "__main__":
    main()
