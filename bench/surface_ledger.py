"""Measure the determinism surface of released frontend wheels into ``core/surface_ledger.json``.

    .venv/bin/python bench/surface_ledger.py [--versions 1.28.0 1.29.0 ...] [--check]

Downloads each release's wheel for this interpreter (``pip download --no-deps``, cached by
testkit.registry), runs the probe's discovery over its files (testkit.surface) and writes, per
release, every knob: entry point, knob, default, kind and how it was read. ``--check`` compares
the measurement with the committed ledger instead of writing it, and exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.registry import registry_wheel
from testkit.surface import discover_wheel

LEDGER = Path(__file__).resolve().parent.parent / "core" / "surface_ledger.json"
VERSIONS = ("1.28.0", "1.29.0", "1.29.1", "1.30.0", "1.31.0", "1.32.0")


def measure(version: str) -> dict[str, object]:
    doc = discover_wheel(registry_wheel(version))
    if doc["truncated"] or doc["unparsed"]:
        raise SystemExit(f"{version}: read only in part: {doc['truncated']} {doc['unparsed']}")
    print(f"{version}: {len(doc['knobs'])} knobs, {doc['files']} files, {doc['seconds']} s",
          file=sys.stderr)  # fmt: skip
    return {"knobs": doc["knobs"], "files": doc["files"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs="*", default=list(VERSIONS))
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    measured = {v: measure(v) for v in args.versions}
    ledger = {
        "about": "The determinism surface of released nvidia-cudnn-frontend wheels, measured by "
        "bench/surface_ledger.py (the probe's discovery over each wheel's files).",
        "releases": measured,
    }
    if args.check:
        held = json.loads(LEDGER.read_text())["releases"]
        differ = [v for v in args.versions if held.get(v, {}).get("knobs") != measured[v]["knobs"]]
        print(f"differ from the ledger: {differ or 'none'}")
        return 1 if differ else 0
    LEDGER.write_text(json.dumps(ledger, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
