"""What the integrity of a stage post costs the service: the protocol's door (every text made
storable, a log's controls escaped) and the redaction of every token the service knows.

    .venv/bin/python bench/stage_door.py [--rounds 50]

Posts are the largest determinism stage the H200 streams recorded
(``docs/measurements/h200-stream-*.json``), with a 64 KiB log, and a worst case at the door's
bounds: 2,000 checks each with a 1 KiB detail and metrics full of escape sequences (just under the
8 MiB a stage post may be) and a 64 KiB log of them. ``PYTHONPATH=<an older tree>`` runs the door
of that tree (its redaction when it has ``redact_result``).
For each: the median time of ``StagePost.model_validate_json`` (the door) and of
``service.results.logs.redact_result`` + ``redact`` of the log with no token present (the common
case: one JSON dump searched) and with one present (every text walked and the result validated
again).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("PYTHONPATH") or str(ROOT))

from core.wire import LOG_MAX_CHARS, StagePost  # noqa: E402
from service.results import logs  # noqa: E402

SECRETS = tuple(
    sorted(
        ["submit-token-for-bench", "runner-token-for-bench", "admin-token-for-bench", "x" * 32],
        key=len,
        reverse=True,
    )
)


def recorded_stage() -> dict[str, Any]:
    best: tuple[int, dict[str, Any]] | None = None
    for path in glob.glob(str(ROOT / "docs/measurements/h200-stream-*.json")):
        for build in json.loads(Path(path).read_text())["builds"]:
            for job in build["jobs"]:
                for stage in job["stages"]:
                    size = len(json.dumps(stage))
                    if best is None or size > best[0]:
                        best = (size, stage)
    assert best is not None
    return best[1]


def worst_stage() -> dict[str, Any]:
    detail = ("d\x1b[31m" * 400)[:1024]
    checks = [
        {
            "name": f"sdpa_bwd.check_{i}",
            "status": "pass",
            "detail": detail,
            "metrics": {"note": detail[:512], "values": [1.0] * 32},
        }
        for i in range(2000)
    ]
    return {"name": "determinism", "status": "pass", "checks": checks}


def median_s(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    cases = {
        "recorded determinism stage": (recorded_stage(), "pip output line\n" * 4096),
        "2,000 checks at the bounds": (worst_stage(), "\x1b[2K\r" * (LOG_MAX_CHARS // 5)),
    }
    for name, (stage, log) in cases.items():
        measure(name, stage, log, rounds)


def measure(name: str, stage: dict[str, Any], log: str, rounds: int) -> None:
    body = json.dumps({"lease_token": "t" * 32, "result": stage, "log": log[:LOG_MAX_CHARS]})
    post = StagePost.model_validate_json(body)
    door = median_s(lambda: StagePost.model_validate_json(body), rounds)
    line = f"{name}: {len(body) / 1024:,.0f} KiB posted; door {door * 1e3:.2f} ms"
    if hasattr(logs, "redact_result"):  # (absent before it: run against an older tree to compare)
        clean = median_s(lambda: logs.redact_result(post.result, SECRETS), rounds)
        leaked = post.result.model_copy(update={"reason": f"leaked {SECRETS[0]}"})
        dirty = median_s(lambda: logs.redact_result(leaked, SECRETS), max(rounds // 5, 3))
        line += f"; redaction {clean * 1e3:.2f} ms without a token, {dirty * 1e3:.2f} ms with one"
    print(line)


if __name__ == "__main__":
    main()
