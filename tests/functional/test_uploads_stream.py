"""Reading an upload: the body is streamed and bounded while it arrives, the multipart framing is
checked, and a refusal or a client that goes away leaves no file. A real uvicorn on 127.0.0.1,
driven by httpx and by a raw socket (the upload app and its helpers are in tests/helpers.py).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import httpx
import pytest

from service.uploads import uploads
from testkit import loopback
from testkit.waiting import eventually
from tests.helpers import (
    WHEEL_NAME,
    MiB,
    UploadServer,
    assert_refused,
    files_left,
    wheel_with,
)


def multipart_head(boundary: str, filename: str = WHEEL_NAME) -> bytes:
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


def post_endless(
    server: UploadServer,
    head: bytes,
    total: int,
    *,
    max_bytes: int | None = None,
    length: int | None = None,
) -> tuple[httpx.Response, Endless]:
    """POST ``head`` then zeros up to ``total`` bytes as multipart (boundary ``b0undary``),
    chunked unless ``length`` is declared; returns the answer and the body (``sent`` so far)."""
    body = Endless(head, total=total)
    headers = {"content-type": "multipart/form-data; boundary=b0undary"}
    if length is not None:
        headers["content-length"] = str(length)
    params = {"max_bytes": max_bytes} if max_bytes is not None else None
    resp = loopback.post(server.url, params=params, content=iter(body), headers=headers, timeout=60)
    return resp, body


def test_bad_file_name_is_refused_before_the_data_is_read(upload_server: UploadServer) -> None:
    head = multipart_head("b0undary", "nvidia_cudnn_frontend.whl")
    resp, body = post_endless(upload_server, head, 1024 * MiB)
    assert_refused(upload_server, resp, 422, "bad_wheel_filename", "filename")
    assert body.sent < 64 * MiB, body.sent


# ---------------------------------------------------------------- size and framing


def test_oversized_body_is_refused_while_it_streams(upload_server: UploadServer) -> None:
    """No Content-Length (chunked): the server stops reading soon after the limit."""
    resp, body = post_endless(upload_server, multipart_head("b0undary"), 2048 * MiB, max_bytes=MiB)
    error = assert_refused(upload_server, resp, 413, "upload_too_large")
    assert error["message"] == f"the wheel is larger than the limit of {MiB} bytes"
    assert body.sent < 64 * MiB, body.sent  # the rest of the 2 GiB was never asked for


def test_other_fields_count_towards_the_body_limit(upload_server: UploadServer) -> None:
    """An ignored field is not stored, but it is not read without bound either."""
    head = b'--b0undary\r\nContent-Disposition: form-data; name="notes"\r\n\r\n'
    resp, body = post_endless(upload_server, head, 2048 * MiB, max_bytes=MiB)
    error = assert_refused(upload_server, resp, 413, "upload_too_large")
    limit = MiB + uploads.ENVELOPE_BYTES
    assert error["message"] == f"the request body is larger than the limit of {limit} bytes"
    assert body.sent < 64 * MiB, body.sent


def test_declared_content_length_over_the_limit_is_refused_before_reading(
    upload_server: UploadServer,
) -> None:
    total = 2048 * MiB
    resp, body = post_endless(
        upload_server, multipart_head("b0undary"), total, max_bytes=MiB, length=total
    )
    error = assert_refused(upload_server, resp, 413, "upload_too_large")
    assert error["detail"] == {"content_length": total, "max_bytes": MiB}
    assert body.sent < 16 * MiB, body.sent  # nothing read: only what the socket buffers took


def test_no_wheel_field(upload_server: UploadServer) -> None:
    resp = loopback.post(
        upload_server.url,
        data={"notes": "hello"},
        files={"file": (WHEEL_NAME, wheel_with(), "application/octet-stream")},
        timeout=60,
    )
    error = assert_refused(upload_server, resp, 422, "missing_wheel")
    assert error["message"] == "the form has no file field 'wheel'"


def test_two_wheel_fields(upload_server: UploadServer) -> None:
    wheel = (WHEEL_NAME, wheel_with(), "application/octet-stream")
    resp = loopback.post(upload_server.url, files=[("wheel", wheel), ("wheel", wheel)], timeout=60)
    error = assert_refused(upload_server, resp, 400, "bad_request")
    assert "more than one 'wheel' field" in error["message"]


def test_wheel_field_without_file_name(upload_server: UploadServer) -> None:
    resp = loopback.post(upload_server.url, data={"wheel": "not a file"}, files={"x": ("x", b"")})
    error = assert_refused(upload_server, resp, 422, "bad_wheel_filename")
    assert "carries no file name" in error["message"]


def test_not_multipart(upload_server: UploadServer) -> None:
    resp = loopback.post(
        upload_server.url, content=wheel_with(), headers={"content-type": "application/zip"}
    )
    assert_refused(upload_server, resp, 400, "bad_request")


def test_body_without_closing_boundary(upload_server: UploadServer) -> None:
    body = multipart_head("b0undary") + wheel_with()  # no "\r\n--b0undary--"
    resp = loopback.post(
        upload_server.url,
        content=body,
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
    )
    error = assert_refused(upload_server, resp, 400, "incomplete_upload")
    assert "before the closing multipart boundary" in error["message"]


def test_client_disconnect_mid_stream_leaves_nothing(
    upload_server: UploadServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fe_ci.uploads")
    head = multipart_head("b0undary")
    request = (
        "POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: multipart/form-data; boundary=b0undary\r\n"
        f"Content-Length: {len(head) + 32 * MiB}\r\n\r\n"
    ).encode()
    tmp = uploads.tmp_dir(upload_server.data_dir)
    with socket.create_connection(("127.0.0.1", upload_server.port)) as sock:
        sock.sendall(request + head + bytes(4 * MiB))
        eventually(
            lambda: tmp.is_dir() and any(p.stat().st_size for p in tmp.rglob("*.part")),
            timeout=10,
            interval=0.02,
            message="the server to start writing the upload",
        )
    eventually(
        lambda: files_left(upload_server.data_dir),
        until=lambda left: not left,
        timeout=10,
        interval=0.02,
        message="the cut upload's files to be removed",
    )
    eventually(  # a refusal, not an unhandled crash
        lambda: caplog.text,
        until=lambda text: "code=incomplete_upload" in text,
        timeout=10,
        interval=0.02,
        message="the refusal in the log",
    )
    assert "the client disconnected after" in caplog.text
