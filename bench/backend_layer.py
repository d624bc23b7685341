"""What a cuDNN backend of the matrix costs a runner host: its layer built once, then reused.

    .venv/bin/python bench/backend_layer.py [--mb 64] [--rounds 5] [--json OUT]

A constructed ``nvidia-cudnn-cu13`` 9.28.1.4 wheel (testkit/backends.py: a real shared library
as ``libcudnn.so.9``, padded with ``--mb`` MiB of incompressible bytes in
``nvidia/cudnn/lib``) in a local wheelhouse; per round, a fresh layers dir: the first
``runner.envs.backend.ensure`` builds the layer (the installer in the job's sandbox, the checks,
read-only, renamed into place), the second finds it (what every later job of the host pays).
The real wheel is about 600 MB: its build time is measured on the GPU host by the same script
with ``--wheelhouse`` pointing at a directory holding the real one.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.envs import backend, envs  # noqa: E402
from runner.isolation import jail, jobbox  # noqa: E402
from testkit.backends import backend_wheel  # noqa: E402


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--wheelhouse", type=Path, default=None, help="a real backend wheel's dir")
    ap.add_argument("--version", default="9.28.1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fe-ci-bench-backend-"))
    jail.make_reachable(base)
    os.chmod(base, 0o755)
    wheelhouse = args.wheelhouse
    if wheelhouse is None:
        wheelhouse = base / "wheelhouse"
        backend_wheel(wheelhouse, pad_mb=args.mb)
    # the backend wheels alone: a real wheelhouse holds the frontend's closure beside them
    wheel_bytes = sum(p.stat().st_size for p in wheelhouse.glob("nvidia_cudnn_cu*.whl"))
    built, reused, sizes = [], [], []
    try:
        for n in range(args.rounds):
            layers_dir = base / f"layers-{n}"
            with jobbox.temporary(base / f"job-{n}") as job:
                ensure = functools.partial(
                    backend.ensure,
                    args.version,
                    layers_dir=layers_dir,
                    timeout_s=1800,
                    index_url=None,
                    wheelhouse=wheelhouse,
                    job=job,
                )
                t0 = time.perf_counter()
                layer = ensure()
                built.append(time.perf_counter() - t0)
                assert layer.built_s is not None
                t0 = time.perf_counter()
                again = ensure()
                reused.append(time.perf_counter() - t0)
                assert again.built_s is None and again.root == layer.root
                sizes.append(_size(layer.root))
    finally:
        for p in base.glob("layers-*"):
            from runner.envs import layers

            for child in p.iterdir():
                layers.remove(child)
        shutil.rmtree(base, ignore_errors=True)
    doc = {
        "installer": envs.choose_installer(),
        "wheel_mb": round(wheel_bytes / 2**20, 1),
        "layer_mb": round(statistics.median(sizes) / 2**20, 1),
        "build_s": [round(x, 3) for x in built],
        "build_median_s": round(statistics.median(built), 3),
        "reuse_s": [round(x, 4) for x in reused],
        "reuse_median_s": round(statistics.median(reused), 4),
    }
    print(json.dumps(doc, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
