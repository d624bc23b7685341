"""Wheel uploads through a real uvicorn on 127.0.0.1, driven by httpx.

A small app defined here calls ``receive_wheel`` and answers the one JSON error shape. Every
rejection asserts its status, its code, the check that refused it, and that the data dir holds no
file afterwards (no temp file, no blob).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service import uploads, wheelcheck
from service.errors import ApiError
from testkit import wheels
from testkit.registry import registry_wheel
from testkit.service import ROOT

NAME = wheels.wheel_name("1.32.0")
DIST_INFO = wheels.dist_info("1.32.0")
METADATA = wheels.metadata("1.32.0")
WHEEL = wheels.WHEEL_FILE
MiB = 1024 * 1024


def make_app(data_dir: Path) -> FastAPI:
    app = FastAPI()

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        # Without "Connection: close" uvicorn would keep the connection alive and drain (read and
        # drop) the rest of a refused body; closing it is what makes the refusal stop the client.
        headers = {"Connection": "close"}
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers)

    @app.post("/upload")
    async def upload(
        request: Request,
        max_bytes: int = 64 * MiB,
        max_unpacked: int = wheelcheck.MAX_UNPACKED_BYTES,
    ) -> dict[str, Any]:
        stored = await uploads.receive_wheel(
            request, data_dir=data_dir, max_bytes=max_bytes, max_unpacked_bytes=max_unpacked
        )
        return {**asdict(stored), "path": str(stored.path)}

    return app


class Server:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        config = uvicorn.Config(make_app(data_dir), host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        sock = self.server.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/upload"
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("uploads") / "data") as srv:
        yield srv


@pytest.fixture(autouse=True)
def clean_data_dir(server: Server) -> None:
    shutil.rmtree(server.data_dir, ignore_errors=True)
    server.data_dir.mkdir(parents=True)


# ---------------------------------------------------------------- helpers


def files_left(data_dir: Path) -> list[Path]:
    return sorted(p for p in data_dir.rglob("*") if not p.is_dir())


def wheel_with(
    extra: dict[str, bytes] | None = None,
    *,
    metadata: bytes | None = METADATA,
    wheel: bytes | None = WHEEL,
    dist_info: str = DIST_INFO,
) -> bytes:
    """A 1.32.0 frontend wheel's bytes, with METADATA or WHEEL left out (``None``) or changed."""
    members: dict[str, bytes] = {"cudnn/__init__.py": b"__version__ = '1.32.0'\n"}
    if metadata is not None:
        members[f"{dist_info}/METADATA"] = metadata
    if wheel is not None:
        members[f"{dist_info}/WHEEL"] = wheel
    members.update(extra or {})
    # a RECORD of the members, as a wheel builder writes it (none without a .dist-info at all)
    listed = metadata is not None or wheel is not None
    return wheels.wheel_bytes(members, record=dist_info if listed else None)


def record_of(members: dict[str, bytes], record: str) -> bytes:
    """The RECORD of ``members``, as a wheel builder writes it."""
    lines = [wheels.record_line(name, data) for name, data in members.items()]
    return ("\n".join([*lines, f"{record},,"]) + "\n").encode()


def post(server: Server, content: bytes, filename: str = NAME, **params: int) -> httpx.Response:
    files = {"wheel": (filename, content, "application/octet-stream")}
    return httpx.post(server.url, files=files, params=params, timeout=60)


def assert_refused(
    server: Server, resp: httpx.Response, status: int, code: str, check: str | None = None
) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "detail"}
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    if check is not None:
        assert error["detail"]["check"] == check, error
    assert files_left(server.data_dir) == []
    return dict(error)


def multipart_head(boundary: str, filename: str = NAME) -> bytes:
    return (
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="wheel"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


class Endless:
    """A request body: a multipart head, then zeros up to ``total`` bytes; counts what it gave."""

    def __init__(self, head: bytes, total: int, chunk: int = 64 * 1024) -> None:
        self.head, self.total, self.chunk = head, total, chunk
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        self.sent += len(self.head)
        yield self.head
        zeros = bytes(self.chunk)
        while self.sent < self.total:
            self.sent += len(zeros)
            yield zeros


# ---------------------------------------------------------------- the good path


def test_minimal_constructed_wheel_is_accepted(server: Server) -> None:
    """The control for the constructed rejections below: without its defect the wheel passes."""
    resp = post(server, wheel_with())
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == "1.32.0"
    assert resp.json()["distribution"] == "nvidia-cudnn-frontend"


def test_registry_wheel_is_stored_by_sha256_and_reused(server: Server) -> None:
    path = registry_wheel("1.32.0")
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()

    first = post(server, data, filename=path.name)
    assert first.status_code == 200, first.text
    stored = first.json()
    assert stored["sha256"] == sha
    assert stored["version"] == "1.32.0"
    assert stored["filename"] == path.name
    assert stored["size"] == len(data)
    assert stored["created"] is True
    blob = server.data_dir / "blobs" / sha[:2] / f"{sha}.whl"
    assert Path(stored["path"]) == blob == uploads.blob_path(server.data_dir, sha)
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == sha

    second = post(server, data, filename=path.name)
    assert second.status_code == 200, second.text
    assert second.json()["sha256"] == sha
    assert second.json()["created"] is False
    assert files_left(server.data_dir) == [blob]


# ---------------------------------------------------------------- what is not a wheel


def test_not_a_zip(server: Server) -> None:
    resp = post(server, b"#!/bin/sh\necho this is no zip\n" * 100)
    error = assert_refused(server, resp, 422, "not_a_wheel", "zip")
    assert "not a zip" in error["message"]


def test_zip_without_dist_info(server: Server) -> None:
    resp = post(server, wheel_with(metadata=None, wheel=None))
    error = assert_refused(server, resp, 422, "not_a_wheel", "dist_info")
    assert "no .dist-info directory" in error["message"]


@pytest.mark.parametrize(("missing", "check"), [("METADATA", "metadata"), ("WHEEL", "wheel_file")])
def test_dist_info_without_required_file(server: Server, missing: str, check: str) -> None:
    kwargs: dict[str, Any] = {missing.lower(): None}
    resp = post(server, wheel_with(**kwargs))
    error = assert_refused(server, resp, 422, "not_a_wheel", check)
    assert error["message"] == f"the wheel has no {missing} in {DIST_INFO}/"


def test_dist_info_of_another_version(server: Server) -> None:
    resp = post(server, wheel_with(dist_info="nvidia_cudnn_frontend-1.31.0.dist-info"))
    assert_refused(server, resp, 422, "not_a_wheel", "dist_info")


def test_unknown_wheel_version(server: Server) -> None:
    resp = post(server, wheel_with(wheel=b"Wheel-Version: 2.0\n"))
    error = assert_refused(server, resp, 422, "not_a_wheel", "wheel_version")
    assert "Wheel-Version 2.0" in error["message"]


def test_metadata_version_differs_from_file_name(server: Server) -> None:
    meta = METADATA.replace(b"1.32.0", b"1.31.0")
    resp = post(server, wheel_with(metadata=meta))
    error = assert_refused(server, resp, 422, "not_a_wheel", "metadata_version")
    assert error["message"] == "METADATA says version '1.31.0' but the file name says 1.32.0"


# ---------------------------------------------------------------- another distribution, bad names


def test_file_name_of_another_distribution(server: Server) -> None:
    resp = post(server, wheel_with(), filename="foo-1.32.0-py3-none-any.whl")
    error = assert_refused(server, resp, 422, "wrong_distribution", "distribution")
    assert error["message"] == (
        "the file name names distribution 'foo', expected nvidia-cudnn-frontend"
    )


def test_metadata_of_another_distribution(server: Server) -> None:
    meta = METADATA.replace(b"Name: nvidia-cudnn-frontend", b"Name: foo")
    resp = post(server, wheel_with(metadata=meta))
    error = assert_refused(server, resp, 422, "wrong_distribution", "metadata_name")
    assert error["message"] == "METADATA names distribution 'foo', expected nvidia-cudnn-frontend"


def test_metadata_name_is_compared_normalized(server: Server) -> None:
    meta = METADATA.replace(b"nvidia-cudnn-frontend", b"NVIDIA_cuDNN.Frontend")
    resp = post(server, wheel_with(metadata=meta))
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    ("filename", "says"),
    [
        ("nvidia_cudnn_frontend.whl", "not a PEP 427 wheel name"),
        ("nvidia_cudnn_frontend-1.32.0.whl", "not a PEP 427 wheel name"),
        ("nvidia_cudnn_frontend-notaversion-py3-none-any.whl", "not a PEP 427 wheel name"),
        ("nvidia_cudnn_frontend-1.32.0-py3-none-any.zip", "does not end in .whl"),
        ("dir/nvidia_cudnn_frontend-1.32.0-py3-none-any.whl", "path separator"),
    ],
)
def test_non_pep427_file_name(server: Server, filename: str, says: str) -> None:
    resp = post(server, wheel_with(), filename=filename)
    error = assert_refused(server, resp, 422, "bad_wheel_filename", "filename")
    assert says in error["message"]


def test_bad_file_name_is_refused_before_the_data_is_read(server: Server) -> None:
    body = Endless(multipart_head("b0undary", "nvidia_cudnn_frontend.whl"), total=1024 * MiB)
    resp = httpx.post(
        server.url,
        content=iter(body),
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
        timeout=60,
    )
    assert_refused(server, resp, 422, "bad_wheel_filename", "filename")
    assert body.sent < 64 * MiB, body.sent


# ---------------------------------------------------------------- unsafe members


@pytest.mark.parametrize(
    ("member", "says"),
    [
        ("../x", "member '../x' escapes the wheel"),
        ("cudnn/../../x", "member 'cudnn/../../x' escapes the wheel"),
        ("/x", "member '/x' is an absolute path"),
        ("cudnn\\..\\x", "member 'cudnn\\\\..\\\\x' contains a backslash"),
        ("C:x", "member 'C:x' names a drive"),
    ],
)
def test_unsafe_member_name(server: Server, member: str, says: str) -> None:
    resp = post(server, wheel_with({member: b"payload\n"}))
    error = assert_refused(server, resp, 422, "unsafe_wheel", "member_name")
    assert error["message"] == says


def test_duplicate_member(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("cudnn/__init__.py", b"import os\n")
    resp = post(server, buf.getvalue())
    error = assert_refused(server, resp, 422, "unsafe_wheel", "member_name")
    assert "appears more than once" in error["message"]


def test_symlink_member(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf:
        info = zipfile.ZipInfo("cudnn/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, b"/etc/passwd")
    resp = post(server, buf.getvalue())
    error = assert_refused(server, resp, 422, "unsafe_wheel", "member_type")
    assert error["message"] == "member 'cudnn/link' is a symbolic link"


def _zeros_member(zf: zipfile.ZipFile, name: str, size: int) -> None:
    """Deflate ``size`` zero bytes into ``zf`` in chunks, never holding them all."""
    chunk = bytes(min(size, MiB))
    with zf.open(name, "w", force_zip64=size > 2**31) as out:
        left = size
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def test_decompression_bomb_is_refused_by_its_ratio(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED) as zf:
        _zeros_member(zf, "cudnn/bomb.bin", 400 * MiB)
    data = buf.getvalue()
    assert len(data) < MiB  # a few hundred KB on the wire, 400 MiB unpacked
    resp = post(server, data, max_unpacked=256 * MiB)
    error = assert_refused(server, resp, 422, "unsafe_wheel", "member_ratio")
    assert "member 'cudnn/bomb.bin' would unpack" in error["message"]


def test_many_small_compressible_members_are_refused_by_the_total_ratio(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED) as zf:
        for i in range(300):  # each under the per-member floor, 18.75 MiB in all
            _zeros_member(zf, f"cudnn/pad{i}.bin", 64 * 1024)
    resp = post(server, buf.getvalue())
    error = assert_refused(server, resp, 422, "unsafe_wheel", "total_ratio")
    assert "the archive would unpack" in error["message"]


def test_total_unpacked_size_is_capped(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_STORED) as zf:
        zf.writestr("cudnn/blob.bin", os.urandom(2 * MiB))  # incompressible: ratio 1
    resp = post(server, buf.getvalue(), max_unpacked=MiB)
    error = assert_refused(server, resp, 422, "unsafe_wheel", "unpacked")
    assert f"the limit is {MiB}" in error["message"]


def test_member_count_is_capped(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_STORED) as zf:
        for i in range(wheelcheck.MAX_MEMBERS):
            zf.writestr(f"cudnn/e{i}", b"")
    resp = post(server, buf.getvalue())
    error = assert_refused(server, resp, 422, "unsafe_wheel", "member_count")
    assert f"the archive has more than {wheelcheck.MAX_MEMBERS} members" in error["message"]


# ---------------------------------------------------------------- size and framing


def test_oversized_body_is_refused_while_it_streams(server: Server) -> None:
    """No Content-Length (chunked): the server stops reading soon after the limit."""
    body = Endless(multipart_head("b0undary"), total=2048 * MiB)
    resp = httpx.post(
        server.url,
        params={"max_bytes": MiB},
        content=iter(body),
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
        timeout=60,
    )
    error = assert_refused(server, resp, 413, "upload_too_large")
    assert error["message"] == f"the wheel is larger than the limit of {MiB} bytes"
    assert body.sent < 64 * MiB, body.sent  # the rest of the 2 GiB was never asked for


def test_other_fields_count_towards_the_body_limit(server: Server) -> None:
    """An ignored field is not stored, but it is not read without bound either."""
    head = b'--b0undary\r\nContent-Disposition: form-data; name="notes"\r\n\r\n'
    body = Endless(head, total=2048 * MiB)
    resp = httpx.post(
        server.url,
        params={"max_bytes": MiB},
        content=iter(body),
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
        timeout=60,
    )
    error = assert_refused(server, resp, 413, "upload_too_large")
    limit = MiB + uploads.ENVELOPE_BYTES
    assert error["message"] == f"the request body is larger than the limit of {limit} bytes"
    assert body.sent < 64 * MiB, body.sent


def test_declared_content_length_over_the_limit_is_refused_before_reading(server: Server) -> None:
    total = 2048 * MiB
    body = Endless(multipart_head("b0undary"), total=total)
    resp = httpx.post(
        server.url,
        params={"max_bytes": MiB},
        content=iter(body),
        headers={
            "content-type": "multipart/form-data; boundary=b0undary",
            "content-length": str(total),
        },
        timeout=60,
    )
    error = assert_refused(server, resp, 413, "upload_too_large")
    assert error["detail"] == {"content_length": total, "max_bytes": MiB}
    assert body.sent < 16 * MiB, body.sent  # nothing read: only what the socket buffers took


def test_no_wheel_field(server: Server) -> None:
    resp = httpx.post(
        server.url,
        data={"notes": "hello"},
        files={"file": (NAME, wheel_with(), "application/octet-stream")},
        timeout=60,
    )
    error = assert_refused(server, resp, 422, "missing_wheel")
    assert error["message"] == "the form has no file field 'wheel'"


def test_two_wheel_fields(server: Server) -> None:
    wheel = (NAME, wheel_with(), "application/octet-stream")
    resp = httpx.post(server.url, files=[("wheel", wheel), ("wheel", wheel)], timeout=60)
    error = assert_refused(server, resp, 400, "bad_request")
    assert "more than one 'wheel' field" in error["message"]


def test_wheel_field_without_file_name(server: Server) -> None:
    resp = httpx.post(server.url, data={"wheel": "not a file"}, files={"x": ("x", b"")})
    error = assert_refused(server, resp, 422, "bad_wheel_filename")
    assert "carries no file name" in error["message"]


def test_not_multipart(server: Server) -> None:
    resp = httpx.post(server.url, content=wheel_with(), headers={"content-type": "application/zip"})
    assert_refused(server, resp, 400, "bad_request")


def test_body_without_closing_boundary(server: Server) -> None:
    body = multipart_head("b0undary") + wheel_with()  # no "\r\n--b0undary--"
    resp = httpx.post(
        server.url,
        content=body,
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
    )
    error = assert_refused(server, resp, 400, "incomplete_upload")
    assert "before the closing multipart boundary" in error["message"]


def test_client_disconnect_mid_stream_leaves_nothing(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fe_ci.uploads")
    head = multipart_head("b0undary")
    request = (
        "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: multipart/form-data; boundary=b0undary\r\n"
        f"Content-Length: {len(head) + 32 * MiB}\r\n\r\n"
    ).encode()
    tmp = uploads.tmp_dir(server.data_dir)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request + head + bytes(4 * MiB))
        deadline = time.monotonic() + 10
        while not (tmp.is_dir() and any(p.stat().st_size for p in tmp.rglob("*.part"))):
            assert time.monotonic() < deadline, "the server never started writing the upload"
            time.sleep(0.02)
    deadline = time.monotonic() + 10
    while files_left(server.data_dir):
        assert time.monotonic() < deadline, files_left(server.data_dir)
        time.sleep(0.02)
    deadline = time.monotonic() + 10
    while "code=incomplete_upload" not in caplog.text:  # a refusal, not an unhandled crash
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.02)
    assert "the client disconnected after" in caplog.text


# ---------------------------------------------------------------- discard and sweep


def test_discard_removes_only_a_blob_this_upload_created(server: Server) -> None:
    first = post(server, wheel_with()).json()
    stored = uploads.StoredWheel(**{**first, "path": Path(first["path"])})
    reused = uploads.StoredWheel(**{**first, "path": Path(first["path"]), "created": False})
    uploads.discard(reused)
    assert stored.path.is_file()
    uploads.discard(stored)
    assert files_left(server.data_dir) == []


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
        "from service import uploads\n"
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


# ---------------------------------------------------------------- RECORD


def test_a_member_that_does_not_match_its_record_hash_is_refused(server: Server) -> None:
    """A wheel edited after it was built: RECORD lists the original bytes."""
    good = wheel_with({"cudnn/api.py": b"def f(): return 1\n"})
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, b"def f(): return 2\n" if "api" in info.filename else data)
    error = assert_refused(server, post(server, buf.getvalue()), 422, "not_a_wheel", "record")
    assert "'cudnn/api.py' does not match its RECORD hash" in error["message"]


def test_a_member_record_does_not_list_is_refused(server: Server) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("cudnn/smuggled.py", b"import os\n")
    error = assert_refused(server, post(server, buf.getvalue()), 422, "not_a_wheel", "record")
    assert "'cudnn/smuggled.py' is not listed in RECORD" in error["message"]


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (None, "has no"),
        (b"cudnn/__init__.py,md5=abc,23\n", "no sha256"),
        (b"cudnn/gone.py,sha256=abc,1\n", "which the archive does not have"),
    ],
    ids=["missing", "weak-hash", "lists-absent"],
)
def test_a_missing_or_wrong_record_is_refused(
    server: Server, record: bytes | None, says: str
) -> None:
    members = {
        "cudnn/__init__.py": b"__version__ = '1.32.0'\n",
        f"{DIST_INFO}/METADATA": METADATA,
        f"{DIST_INFO}/WHEEL": WHEEL,
    }
    rows = record_of(members, f"{DIST_INFO}/RECORD")
    if record is not None and b"md5" in record:
        rows = rows.replace(rows.split(b"\n")[0] + b"\n", record)
    elif record is not None:
        rows += record
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if record is not None or says != "has no":
            zf.writestr(f"{DIST_INFO}/RECORD", rows)
    error = assert_refused(server, post(server, buf.getvalue()), 422, "not_a_wheel", "record")
    assert says in error["message"]
