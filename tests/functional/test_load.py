"""The load test, small and bounded: ``bench/load.py``'s closed loop (concurrent wheel uploads
while readers hit ``/``, ``/api/builds`` and ``/api/builds/{id}``) against a real service on
127.0.0.1, run as the program the docs give.

The full size (20 uploads of 300 MB for 60 s) is ``bench/load.py``'s default; its figures are in
docs/reliability.md. Here: 4 uploads of 64 MB for 8 s, and what must hold at any size: no error,
the service's memory does not grow by even one upload (the body is streamed, never held), and
the store is consistent afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testkit.service import ROOT

SIZE_MB = 64
UPLOADS = 4


def test_concurrent_uploads_and_reads_stream_and_stay_consistent(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "load.py"), "--uploads", str(UPLOADS),
         "--size-mb", str(SIZE_MB), "--readers", "2", "--duration", "8", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    # exit status 0: no error and a consistent store (builds == jobs == accepted uploads, every
    # blob referenced, none missing, no temp file left, integrity_check ok)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["errors"] == 0 and result["uploads_ok"] >= UPLOADS, result
    assert len(result["reads_ok"]) == 3 and all(result["reads_ok"].values()), result
    # Streaming: with 4 uploads in flight the service never grew by one upload's size.
    assert result["rss_mb"]["max"] - result["rss_mb"]["before"] < SIZE_MB, result
    c = result["consistency"]
    assert c["builds"] == c["jobs"] == result["uploads_ok"] and not c["tmp_files"], c
    assert c["blobs"] == 1  # one content, stored once
