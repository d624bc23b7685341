"""Orphan blobs, with real processes: a service SIGKILLed between storing an upload's blob and
committing its build leaves a blob nothing references; the start-up sweep and the periodic sweep
remove it once it is older than ``FE_CI_ORPHAN_GRACE_S``, and never touch an upload in flight.

The kill lands in that window deterministically: the test holds SQLite's write lock, so the upload
streams, is checked, stores its blob, and then waits on the lock to commit its build.
"""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from service.uploads.uploads import blob_path
from testkit.service import Service, service_env
from testkit.waiting import eventually
from testkit.wheels import make_wheel
from tests.helpers import logged


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def write_lock(svc: Service) -> Iterator[sqlite3.Connection]:
    """Hold the database's write lock (readers go on: the database is in WAL mode)."""
    conn = sqlite3.connect(svc.data_dir / "fe-ci.sqlite3", isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def upload_in_thread(svc: Service, wheel: Path) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            with wheel.open("rb") as fh:
                outcome.append(
                    svc.http().post("/validate", files={"wheel": (wheel.name, fh)}).status_code
                )
        except httpx.TransportError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def orphan_by_kill(svc: Service, wheel: Path) -> Path:
    """Upload ``wheel`` to ``svc`` and SIGKILL it after the blob is stored, before the commit."""
    blob = blob_path(svc.data_dir, sha256(wheel))
    with write_lock(svc):
        thread, outcome = upload_in_thread(svc, wheel)
        eventually(blob.is_file, timeout=60, interval=0.05, message="the upload's blob")
        svc.stop(signal.SIGKILL)
    thread.join(30)
    assert outcome and not isinstance(outcome[0], int), outcome  # it never got an answer
    assert blob.is_file()
    return blob


def test_an_orphan_of_a_killed_service_is_removed_at_start_up(make_service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service(FE_CI_SWEEP_INTERVAL_S="3600")
    kept = make_wheel(tmp_path / "kept", "9.1.0", "")
    with kept.open("rb") as fh:
        assert svc.http().post("/validate", files={"wheel": (kept.name, fh)}).status_code == 202
    orphan = orphan_by_kill(svc, make_wheel(tmp_path / "orphan", "9.2.0", ""))
    assert svc.count("builds") == 1  # the killed upload committed nothing
    svc.env["FE_CI_ORPHAN_GRACE_S"] = "0"
    svc.start()  # the periodic sweep is an hour away: only the start-up sweep can act
    assert not orphan.exists()
    assert blob_path(svc.data_dir, sha256(kept)).is_file()  # a referenced blob stays
    assert "event=orphan_blob_removed" in svc.log_path.read_text()
    assert "at=startup" in svc.log_path.read_text()


def test_the_periodic_sweep_removes_an_orphan_and_never_an_upload_in_flight(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Two processes over one data dir: the live one sweeps every 0.2 s with a 5 s grace. Its
    own upload, held 1.5 s between storing the blob and committing, is kept and completes; the
    orphan the killed one leaves is removed once past the grace."""
    live: Service = make_service(FE_CI_ORPHAN_GRACE_S="5", FE_CI_SWEEP_INTERVAL_S="0.2")
    doomed = Service(data_dir=live.data_dir, env=service_env(live.data_dir, **_sweep_env(live)))
    doomed.start()
    try:
        wheel = make_wheel(tmp_path / "flight", "9.3.0", "")
        blob = blob_path(live.data_dir, sha256(wheel))
        with write_lock(live):
            thread, outcome = upload_in_thread(live, wheel)
            eventually(blob.is_file, timeout=60, interval=0.05, message="the upload's blob")
            time.sleep(1.5)  # some seven sweeps see an unreferenced blob within its grace
            assert blob.is_file()
        thread.join(60)
        assert outcome == [202] and blob.is_file()
        orphan = orphan_by_kill(doomed, make_wheel(tmp_path / "orphan", "9.4.0", ""))
        eventually(
            lambda: not orphan.exists(),
            timeout=60,
            interval=0.05,
            message="the periodic sweep to remove the orphan",
        )
        assert blob.is_file()
        # the sweep logs the removal just after the unlink
        eventually(logged(live.log_path, "event=orphan_blob_removed"), timeout=10, interval=0.05)
        assert "at=periodic" in live.log_path.read_text()
    finally:
        doomed.stop(signal.SIGKILL)


def _sweep_env(svc: Service) -> dict[str, str]:
    return {k: v for k, v in svc.env.items() if k in ("FE_CI_ORPHAN_GRACE_S",)}
