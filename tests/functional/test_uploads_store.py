"""Where an accepted wheel goes: a blob named by its sha256, stored once and reused, removed only
by the upload that created it; temp files of killed uploads are swept, those of live processes
kept. A real uvicorn on 127.0.0.1 (the upload app and its helpers are in tests/helpers.py).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from service.uploads import uploads
from testkit.registry import registry_wheel
from testkit.service import ROOT
from tests.helpers import UploadServer, files_left, post, wheel_with


def test_registry_wheel_is_stored_by_sha256_and_reused(upload_server: UploadServer) -> None:
    path = registry_wheel("1.32.0")
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()

    first = post(upload_server, data, filename=path.name)
    assert first.status_code == 200, first.text
    stored = first.json()
    assert stored["sha256"] == sha
    assert stored["version"] == "1.32.0"
    assert stored["filename"] == path.name
    assert stored["size"] == len(data)
    assert stored["created"] is True
    blob = upload_server.data_dir / "blobs" / sha[:2] / f"{sha}.whl"
    assert Path(stored["path"]) == blob == uploads.blob_path(upload_server.data_dir, sha)
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha

    second = post(upload_server, data, filename=path.name)
    assert second.status_code == 200, second.text
    assert second.json()["sha256"] == sha
    assert second.json()["created"] is False
    assert files_left(upload_server.data_dir) == [blob]


# ---------------------------------------------------------------- discard and sweep


def test_discard_removes_only_a_blob_this_upload_created(upload_server: UploadServer) -> None:
    first = post(upload_server, wheel_with()).json()
    stored = uploads.StoredWheel(**{**first, "path": Path(first["path"])})
    reused = uploads.StoredWheel(**{**first, "path": Path(first["path"]), "created": False})
    uploads.discard(reused)
    assert stored.path.is_file()
    uploads.discard(stored)
    assert files_left(upload_server.data_dir) == []


def test_sweep_tmp_removes_stale_temp_files(tmp_path: Path) -> None:
    tmp = uploads.tmp_dir(tmp_path)
    tmp.mkdir(parents=True)
    (tmp / "upload-killed.part").write_bytes(b"half a wheel")
    blob = uploads.blob_path(tmp_path, "ab" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"kept")
    assert uploads.sweep_tmp(tmp_path) == 1
    assert files_left(tmp_path) == [blob]
    assert uploads.sweep_tmp(tmp_path / "missing") == 0


def test_sweep_removes_a_killed_process_area_and_keeps_a_live_one(tmp_path: Path) -> None:
    """Service replicas share a data dir: one starting up must not remove another's uploads in
    flight, only those of a process that died (its lock on its area is gone with it)."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from service.uploads import uploads\n"
        "area = uploads.upload_area(Path(sys.argv[1]))\n"
        "(area / 'upload-dead.part').write_bytes(b'half a wheel')\n"
        "print(area, flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    try:
        assert child.stdout is not None
        dead = Path(child.stdout.readline().strip())
        live = uploads.upload_area(tmp_path)
        (live / "upload-live.part").write_bytes(b"in flight")
        assert uploads.sweep_tmp(tmp_path) == 0  # the other process is alive
        assert (dead / "upload-dead.part").is_file()
    finally:
        child.kill()
        child.wait()
    assert uploads.sweep_tmp(tmp_path) == 1
    assert not dead.exists()
    assert (live / "upload-live.part").is_file()  # this process's own area is never swept
    assert uploads.upload_area(tmp_path) == live
