"""A stand-in for ``python -m runner.inside.subjects.base`` (the sm_100a compile-only worker).

A double because compiling for sm_100a needs the candidate's CuTe DSL kernels, which this host's
test environment lacks; the determinism stage's handling of the process (started in the
background, waited for, its result kept and reused under the compile cache key) is real.

``python -m tests.fakecompileonly --in P --out R`` with ``FAKE_COMPILE_DIR`` set: records
``<subject>.<pid>.start``, waits (at most ``FAKE_COMPILE_WAIT_S``) until every subject named in
``FAKE_COMPILE_PEERS`` has started, records ``<subject>.<pid>.end`` and writes a passing result.
Run one after the other, the first would wait in vain: whether they overlapped is read from the
files, an ordering, not a timing threshold. With ``FAKE_COMPILE_GARBAGE`` set it writes half a
document and exits 1; with ``FAKE_COMPILE_HANG`` set it forks a process, as the real worker forks
one per arm (``runner.inside.forked``), that writes its pid to ``arm.pid`` and hangs, and hangs
itself.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from runner.inside import forked
from runner.inside._io import run_stage


def fake_compile(params: dict[str, Any]) -> dict[str, Any]:
    subject = str(params["subject"])
    log = Path(os.environ["FAKE_COMPILE_DIR"])
    (log / f"{subject}.{os.getpid()}.start").write_text(repr(time.time()))
    peers = [p for p in os.environ.get("FAKE_COMPILE_PEERS", "").split(",") if p]
    deadline = time.monotonic() + float(os.environ.get("FAKE_COMPILE_WAIT_S", "20"))
    while time.monotonic() < deadline:
        if all(any(log.glob(f"{p}.*.start")) for p in peers):
            break
        time.sleep(0.05)
    (log / f"{subject}.{os.getpid()}.end").write_text(repr(time.time()))
    arm = {"kernels": 1, "compile_s": 0.05, "targets": ["sm_100a"], "cubin_bytes": 10}
    return {
        "config": {"name": "fake"},
        "arch": os.environ.get("CUTE_DSL_ARCH"),
        "deterministic": {**arm, "ptx_sha256": "d"},
        "default": {**arm, "ptx_sha256": "e"},
        "knob_changes_kernel": True,
        "status": "pass",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _hang() -> dict[str, Any]:
    """An arm, forked as the real worker forks one (``runner.inside.forked``), that never ends."""
    (Path(os.environ["FAKE_COMPILE_DIR"]) / "arm.pid").write_text(str(os.getpid()))
    time.sleep(300)
    return {}


if __name__ == "__main__":
    if os.environ.get("FAKE_COMPILE_HANG"):  # a compile that never ends, an arm forked
        forked.start(_hang)
        time.sleep(300)
        os._exit(0)
    if os.environ.get("FAKE_COMPILE_GARBAGE"):  # a worker that dies half-way through its output
        Path(sys.argv[sys.argv.index("--out") + 1]).write_text('{"status": "pa')
        raise SystemExit(1)
    raise SystemExit(run_stage(fake_compile, sys.argv[1:]))
