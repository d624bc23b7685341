"""The load test, small and bounded: bench/load.py's closed loop (concurrent wheel uploads while
readers hit ``/``, ``/api/builds`` and ``/api/builds/{id}``) against a real service on 127.0.0.1.

The full size (20 uploads of 300 MB for 60 s) is ``bench/load.py``; its figures are in
docs/reliability.md. Here: 4 uploads of 64 MB for 8 s, and what must hold at any size: no error,
the service's memory does not grow by even one upload (the body is streamed, never held), and
the store is consistent afterwards.
"""

from __future__ import annotations

from pathlib import Path

from bench.load import consistent, make_big_wheel, run_load, start_service

SIZE_MB = 64
UPLOADS = 4


def test_concurrent_uploads_and_reads_stream_and_stay_consistent(tmp_path: Path) -> None:
    wheel = make_big_wheel(tmp_path / "wheel", SIZE_MB)
    svc = start_service(tmp_path / "data", SIZE_MB + 16, tmp_path / "service.log")
    try:
        result = run_load(svc, wheel, uploads=UPLOADS, readers=2, duration_s=8.0)
    finally:
        svc.stop()
    assert result.errors == 0, result.to_json()
    assert result.uploads_ok >= UPLOADS and all(result.reads_ok.values()), result.to_json()
    assert len(result.reads_ok) == 3  # every kind of read was answered
    # Streaming: with 4 uploads in flight the service never grew by one upload's size.
    assert result.rss_mb["max"] - result.rss_mb["before"] < SIZE_MB, result.to_json()
    assert consistent(result), result.consistency
    assert result.consistency["blobs"] == 1  # one content, stored once
