"""Is it a frontend wheel, and a safe one? Uploads through a real uvicorn on 127.0.0.1, driven by
httpx (the upload app and its helpers are in tests/helpers.py).

Every rejection asserts its status, its code, the check that refused it, and that the data dir
holds no file afterwards (no temp file, no blob).
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from typing import Any

import pytest

from service.uploads import wheelcheck
from testkit.wheels import WHEEL_FILE, record_line
from tests.helpers import (
    DIST_INFO,
    METADATA,
    MiB,
    UploadServer,
    assert_refused,
    post,
    wheel_with,
)


def record_of(members: dict[str, bytes], record: str) -> bytes:
    """The RECORD of ``members``, as a wheel builder writes it."""
    lines = [record_line(name, data) for name, data in members.items()]
    return ("\n".join([*lines, f"{record},,"]) + "\n").encode()


# ---------------------------------------------------------------- the good path


def test_minimal_constructed_wheel_is_accepted(upload_server: UploadServer) -> None:
    """The control for the constructed rejections below: without its defect the wheel passes."""
    resp = post(upload_server, wheel_with())
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == "1.32.0"
    assert resp.json()["distribution"] == "nvidia-cudnn-frontend"


# ---------------------------------------------------------------- what is not a wheel


def test_not_a_zip(upload_server: UploadServer) -> None:
    resp = post(upload_server, b"#!/bin/sh\necho this is no zip\n" * 100)
    error = assert_refused(upload_server, resp, 422, "not_a_wheel", "zip")
    assert "not a zip" in error["message"]


def test_zip_without_dist_info(upload_server: UploadServer) -> None:
    resp = post(upload_server, wheel_with(metadata=None, wheel=None))
    error = assert_refused(upload_server, resp, 422, "not_a_wheel", "dist_info")
    assert "no .dist-info directory" in error["message"]


@pytest.mark.parametrize(("missing", "check"), [("METADATA", "metadata"), ("WHEEL", "wheel_file")])
def test_dist_info_without_required_file(
    upload_server: UploadServer, missing: str, check: str
) -> None:
    kwargs: dict[str, Any] = {missing.lower(): None}
    resp = post(upload_server, wheel_with(**kwargs))
    error = assert_refused(upload_server, resp, 422, "not_a_wheel", check)
    assert error["message"] == f"the wheel has no {missing} in {DIST_INFO}/"


def test_dist_info_of_another_version(upload_server: UploadServer) -> None:
    resp = post(upload_server, wheel_with(dist_info="nvidia_cudnn_frontend-1.31.0.dist-info"))
    assert_refused(upload_server, resp, 422, "not_a_wheel", "dist_info")


def test_unknown_wheel_version(upload_server: UploadServer) -> None:
    resp = post(upload_server, wheel_with(wheel=b"Wheel-Version: 2.0\n"))
    error = assert_refused(upload_server, resp, 422, "not_a_wheel", "wheel_version")
    assert "Wheel-Version 2.0" in error["message"]


def test_metadata_version_differs_from_file_name(upload_server: UploadServer) -> None:
    meta = METADATA.replace(b"1.32.0", b"1.31.0")
    resp = post(upload_server, wheel_with(metadata=meta))
    error = assert_refused(upload_server, resp, 422, "not_a_wheel", "metadata_version")
    assert error["message"] == "METADATA says version '1.31.0' but the file name says 1.32.0"


# ---------------------------------------------------------------- another distribution, bad names


def test_file_name_of_another_distribution(upload_server: UploadServer) -> None:
    resp = post(upload_server, wheel_with(), filename="foo-1.32.0-py3-none-any.whl")
    error = assert_refused(upload_server, resp, 422, "wrong_distribution", "distribution")
    assert error["message"] == (
        "the file name names distribution 'foo', expected nvidia-cudnn-frontend"
    )


def test_metadata_of_another_distribution(upload_server: UploadServer) -> None:
    meta = METADATA.replace(b"Name: nvidia-cudnn-frontend", b"Name: foo")
    resp = post(upload_server, wheel_with(metadata=meta))
    error = assert_refused(upload_server, resp, 422, "wrong_distribution", "metadata_name")
    assert error["message"] == "METADATA names distribution 'foo', expected nvidia-cudnn-frontend"


def test_metadata_name_is_compared_normalized(upload_server: UploadServer) -> None:
    meta = METADATA.replace(b"nvidia-cudnn-frontend", b"NVIDIA_cuDNN.Frontend")
    resp = post(upload_server, wheel_with(metadata=meta))
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
def test_non_pep427_file_name(upload_server: UploadServer, filename: str, says: str) -> None:
    resp = post(upload_server, wheel_with(), filename=filename)
    error = assert_refused(upload_server, resp, 422, "bad_wheel_filename", "filename")
    assert says in error["message"]


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
def test_unsafe_member_name(upload_server: UploadServer, member: str, says: str) -> None:
    resp = post(upload_server, wheel_with({member: b"payload\n"}))
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "member_name")
    assert error["message"] == says


def test_duplicate_member(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("cudnn/__init__.py", b"import os\n")
    resp = post(upload_server, buf.getvalue())
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "member_name")
    assert "appears more than once" in error["message"]


def test_symlink_member(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf:
        info = zipfile.ZipInfo("cudnn/link")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, b"/etc/passwd")
    resp = post(upload_server, buf.getvalue())
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "member_type")
    assert error["message"] == "member 'cudnn/link' is a symbolic link"


def _zeros_member(zf: zipfile.ZipFile, name: str, size: int) -> None:
    """Deflate ``size`` zero bytes into ``zf`` in chunks, never holding them all."""
    chunk = bytes(min(size, MiB))
    with zf.open(name, "w", force_zip64=size > 2**31) as out:
        left = size
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def test_decompression_bomb_is_refused_by_its_ratio(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED) as zf:
        _zeros_member(zf, "cudnn/bomb.bin", 400 * MiB)
    data = buf.getvalue()
    assert len(data) < MiB  # a few hundred KB on the wire, 400 MiB unpacked
    resp = post(upload_server, data, max_unpacked=256 * MiB)
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "member_ratio")
    assert "member 'cudnn/bomb.bin' would unpack" in error["message"]


def test_many_small_compressible_members_are_refused_by_the_total_ratio(
    upload_server: UploadServer,
) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_DEFLATED) as zf:
        for i in range(300):  # each under the per-member floor, 18.75 MiB in all
            _zeros_member(zf, f"cudnn/pad{i}.bin", 64 * 1024)
    resp = post(upload_server, buf.getvalue())
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "total_ratio")
    assert "the archive would unpack" in error["message"]


def test_total_unpacked_size_is_capped(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_STORED) as zf:
        zf.writestr("cudnn/blob.bin", os.urandom(2 * MiB))  # incompressible: ratio 1
    resp = post(upload_server, buf.getvalue(), max_unpacked=MiB)
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "unpacked")
    assert f"the limit is {MiB}" in error["message"]


def test_member_count_is_capped(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a", zipfile.ZIP_STORED) as zf:
        for i in range(wheelcheck.MAX_MEMBERS):
            zf.writestr(f"cudnn/e{i}", b"")
    resp = post(upload_server, buf.getvalue())
    error = assert_refused(upload_server, resp, 422, "unsafe_wheel", "member_count")
    assert f"the archive has more than {wheelcheck.MAX_MEMBERS} members" in error["message"]


# ---------------------------------------------------------------- RECORD


def test_a_member_that_does_not_match_its_record_hash_is_refused(
    upload_server: UploadServer,
) -> None:
    """A wheel edited after it was built: RECORD lists the original bytes."""
    good = wheel_with({"cudnn/api.py": b"def f(): return 1\n"})
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info.filename, b"def f(): return 2\n" if "api" in info.filename else data)
    error = assert_refused(
        upload_server, post(upload_server, buf.getvalue()), 422, "not_a_wheel", "record"
    )
    assert "'cudnn/api.py' does not match its RECORD hash" in error["message"]


def test_a_member_record_does_not_list_is_refused(upload_server: UploadServer) -> None:
    buf = io.BytesIO(wheel_with())
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr("cudnn/smuggled.py", b"import os\n")
    error = assert_refused(
        upload_server, post(upload_server, buf.getvalue()), 422, "not_a_wheel", "record"
    )
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
    upload_server: UploadServer, record: bytes | None, says: str
) -> None:
    members = {
        "cudnn/__init__.py": b"__version__ = '1.32.0'\n",
        f"{DIST_INFO}/METADATA": METADATA,
        f"{DIST_INFO}/WHEEL": WHEEL_FILE,
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
    error = assert_refused(
        upload_server, post(upload_server, buf.getvalue()), 422, "not_a_wheel", "record"
    )
    assert says in error["message"]
