"""Wheel uploads: stream the body, bound it, hash it, check the wheel, then store it by sha256.

The request body is read with ``request.stream()`` through python-multipart's streaming parser, so
nothing is spooled before the size limit applies. The ``wheel`` part goes to a temp file in this
process's own directory under ``<data_dir>/tmp`` while it is counted and hashed. The wheel is then
checked as a zip by ``service.uploads.wheelcheck``. The event loop only receives: parsing, hashing
and writing run in worker threads, a batch of chunks at a time, and the checks (a fifth of a CPU
second for the 1.32.0 wheel) at most ``FE_CI_UPLOAD_CHECKS`` at once, so pages and health checks
keep a core while wheels upload. Only a wheel that passes every check is moved to
``<data_dir>/blobs/<ab>/<sha256>.whl``; any failure removes the temp file, so a rejected upload
leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypeVar

import anyio
from packaging.version import Version
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from service.errors import ApiError, BadRequest, BadWheelName, UploadError, UploadTooLarge
from service.uploads.wheelcheck import MAX_UNPACKED_BYTES, check_filename, check_wheel

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

log = logging.getLogger("fe_ci.uploads")
_T = TypeVar("_T")

FIELD = "wheel"
ENVELOPE_BYTES = 64 * 1024  # boundaries, part headers and small extra fields around the wheel
BATCH_BYTES = 256 * 1024  # body received before it is handed to a thread to parse, hash, write
# Threads that parse, hash and write upload bodies at once; the rest wait without holding one.
_BODY_THREADS = anyio.CapacityLimiter(4)
# Wheel checks at once where the app sets none (``FE_CI_UPLOAD_CHECKS``): checking a wheel of
# MAX_MEMBERS members costs about 25 MB while it runs.
_CHECKS = anyio.CapacityLimiter(1)


class MissingWheel(UploadError):
    code, message = "missing_wheel", f"the form has no file field '{FIELD}'"


class IncompleteUpload(UploadError):
    code, status_code, message = "incomplete_upload", 400, "the upload ended before it was complete"


@dataclass(frozen=True)
class StoredWheel:
    sha256: str
    filename: str
    size: int
    path: Path
    distribution: str
    version: str
    created: bool  # a new blob file was written (``discard`` may remove it)


def blob_path(data_dir: Path, sha256: str) -> Path:
    return data_dir / "blobs" / sha256[:2] / f"{sha256}.whl"


def tmp_dir(data_dir: Path) -> Path:
    return data_dir / "tmp"


async def receive_wheel(
    request: Request,
    *,
    data_dir: Path,
    max_bytes: int,
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES,
    checks: anyio.CapacityLimiter = _CHECKS,
) -> StoredWheel:
    """Stream the ``wheel`` file of a multipart body to disk, check it, and store it by sha256."""
    boundary = _boundary(request.headers.get("content-type", ""))
    body_limit = max_bytes + ENVELOPE_BYTES
    declared = _content_length(request.headers.get("content-length"))
    if declared is not None and declared > body_limit:
        raise UploadTooLarge(
            f"the request declares {declared} bytes; the limit is {max_bytes} bytes",
            detail={"content_length": declared, "max_bytes": max_bytes},
        )
    fd, name = tempfile.mkstemp(dir=upload_area(data_dir), prefix="upload-", suffix=".part")
    part = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            sink = _WheelSink(out, max_bytes)
            await _stream(request, MultipartParser(boundary, sink.callbacks()), sink, body_limit)
            await _in_thread(_flush, out)
        filename = sink.filename
        dist, version = await anyio.to_thread.run_sync(
            check_wheel, part, filename, Version(sink.version), max_unpacked_bytes, limiter=checks
        )
        path, created = await _in_thread(_store, part, blob_path(data_dir, sink.sha256))
    except BaseException as exc:
        part.unlink(missing_ok=True)
        if isinstance(exc, ApiError):
            log.info(
                "event=upload_rejected code=%s status=%s reason=%r",
                exc.code,
                exc.status_code,
                exc.text,
            )
        raise
    log.info(
        "event=upload_stored sha256=%s size=%s filename=%s version=%s created=%s",
        sink.sha256,
        sink.size,
        filename,
        version,
        created,
    )
    return StoredWheel(sink.sha256, filename, sink.size, path, dist, version, created)


async def _in_thread(func: Callable[..., _T], *args: object) -> _T:
    return await anyio.to_thread.run_sync(func, *args, limiter=_BODY_THREADS)


def discard(stored: StoredWheel) -> None:
    """Remove the blob of ``stored`` if this upload created it (the caller's transaction failed)."""
    if stored.created:
        stored.path.unlink(missing_ok=True)
        log.info("event=blob_discarded sha256=%s", stored.sha256)


_areas: dict[Path, tuple[Path, int]] = {}
_areas_lock = threading.Lock()


def upload_area(data_dir: Path) -> Path:
    """This process's directory for uploads in flight, ``<data_dir>/tmp/live-*``.

    The process holds an exclusive ``flock`` on it for its whole life. The kernel drops a
    process's locks when it dies, however it dies (SIGKILL included), so an area whose lock is
    free belongs to no live service: ``sweep_tmp`` empties those and leaves alone the uploads in
    flight of another service process sharing the data dir (replicas over one volume).
    """
    root = tmp_dir(data_dir)
    with _areas_lock:
        held = _areas.pop(root, None)
        if held is not None:
            if held[0].is_dir():
                _areas[root] = held
                return held[0]
            os.close(held[1])  # someone removed the data dir under us: make a new area
        while True:
            root.mkdir(parents=True, exist_ok=True)
            area = Path(tempfile.mkdtemp(dir=root, prefix="live-"))
            fd = os.open(area, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a starting service's sweep took it before us
                os.close(fd)
                continue
            if area.is_dir():
                _areas[root] = (area, fd)
                return area
            os.close(fd)  # swept between its creation and our lock: make another


def sweep_tmp(data_dir: Path, *, older_than_s: float = 0.0) -> int:
    """Remove what uploads that never finished left behind (a service killed mid-upload): the
    areas of dead service processes, and loose temp files older than ``older_than_s``."""
    tmp = tmp_dir(data_dir)
    if not tmp.is_dir():
        return 0
    cutoff = time.time() - older_than_s
    removed = 0
    for path in tmp.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir() and not path.is_symlink():
                removed += _sweep_area(path)
            elif path.is_file() and path.stat().st_mtime <= cutoff:
                path.unlink()
                removed += 1
    if removed:
        log.info("event=tmp_swept removed=%s dir=%s", removed, tmp)
    return removed


def _sweep_area(area: Path) -> int:
    """Empty and remove ``area`` if no live process holds its lock; the count of files removed."""
    fd = os.open(area, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # a live service's uploads in flight
        files = sum(1 for p in area.rglob("*") if not p.is_dir())
        shutil.rmtree(area, ignore_errors=True)
        return files
    finally:
        os.close(fd)


# ---------------------------------------------------------------- streaming


class _WheelSink:
    """Parser callbacks: the ``wheel`` part is counted, hashed and written; others are dropped."""

    def __init__(self, out: IO[bytes], max_bytes: int) -> None:
        self.out, self.max_bytes = out, max_bytes
        self.digest = hashlib.sha256()
        self.size = 0
        self.found = self.ended = self.in_wheel = False
        self.file_name: str | None = None
        self.version = ""
        self._field, self._value = bytearray(), bytearray()
        self._disposition = b""

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    @property
    def sha256(self) -> str:
        return self.digest.hexdigest()

    @property
    def filename(self) -> str:
        assert self.file_name is not None
        return self.file_name

    def _part_begin(self) -> None:
        self._disposition = b""

    def _header_end(self) -> None:
        if bytes(self._field).strip().lower() == b"content-disposition":
            self._disposition = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        _kind, params = parse_options_header(self._disposition)
        if params.get(b"name") != FIELD.encode():
            return
        if self.found:
            raise BadRequest(f"the form has more than one '{FIELD}' field; send one wheel")
        if b"filename" not in params:
            raise BadWheelName(f"the '{FIELD}' field carries no file name; send it as a file")
        self.found = True
        self.file_name = params[b"filename"].decode("latin-1")
        self.version = check_filename(self.file_name)  # refused before its data is read
        self.in_wheel = True

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if not self.in_wheel:
            return
        chunk = data[start:end]
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise UploadTooLarge(
                f"the wheel is larger than the limit of {self.max_bytes} bytes",
                detail={"max_bytes": self.max_bytes},
            )
        self.digest.update(chunk)
        self.out.write(chunk)

    def _part_end(self) -> None:
        self.in_wheel = False

    def _end(self) -> None:
        self.ended = True


async def _stream(request: Request, parser: MultipartParser, sink: _WheelSink, limit: int) -> None:
    received = 0
    batch: list[bytes] = []
    pending = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            batch.append(chunk)
            pending += len(chunk)
            if pending < BATCH_BYTES and received <= limit and chunk:
                continue  # the end of the body comes as an empty chunk
            await _in_thread(_feed, parser, batch)  # first, so an oversized wheel is named so
            batch, pending = [], 0
            if received > limit:
                raise UploadTooLarge(
                    f"the request body is larger than the limit of {limit} bytes",
                    detail={"max_bytes": sink.max_bytes, "received": received},
                )
            if sink.ended:
                break  # an epilogue after the closing boundary is ignored
        if batch:
            await _in_thread(_feed, parser, batch)
    except ClientDisconnect as exc:
        raise IncompleteUpload(
            f"the client disconnected after {received} bytes", detail={"received": received}
        ) from exc
    except FormParserError as exc:
        raise BadRequest(f"the multipart body is malformed: {exc}") from exc
    if not sink.found:
        raise MissingWheel(detail={"field": FIELD})
    if not sink.ended:
        raise IncompleteUpload(
            f"the body ended after {received} bytes, before the closing multipart boundary",
            detail={"received": received},
        )


def _feed(parser: MultipartParser, chunks: list[bytes]) -> None:
    """Parse ``chunks`` in a worker thread: the sink's callbacks hash and write the wheel."""
    for chunk in chunks:
        parser.write(chunk)


def _boundary(content_type: str) -> bytes:
    kind, params = parse_options_header(content_type)
    if kind != b"multipart/form-data":
        raise BadRequest(
            f"send multipart/form-data with a '{FIELD}' file",
            detail={"content_type": content_type or None},
        )
    boundary = params.get(b"boundary")
    if not boundary or len(boundary) > 70:  # RFC 2046: 1 to 70 characters
        raise BadRequest("the multipart content type has no valid boundary")
    return boundary


def _content_length(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise BadRequest(f"the Content-Length header {value!r} is not a number") from exc


def _flush(out: IO[bytes]) -> None:
    out.flush()
    os.fsync(out.fileno())


def keep(part: Path, data_dir: Path, sha256: str) -> tuple[Path, bool]:
    """Store a checked wheel at ``part`` as the blob of ``sha256`` (the release watcher's door);
    (its path, whether a new blob file was written)."""
    return _store(part, blob_path(data_dir, sha256))


def _store(part: Path, blob: Path) -> tuple[Path, bool]:
    """Move ``part`` to ``blob``; an identical blob already there is reused (created False)."""
    blob.parent.mkdir(parents=True, exist_ok=True)
    if blob.is_file() and blob.stat().st_size != part.stat().st_size:
        log.warning("event=blob_repaired path=%s", blob)  # a truncated blob of an earlier crash
        os.replace(part, blob)
        return blob, True
    try:
        os.link(part, blob)  # atomic create-if-absent: of two racing uploads only one creates
    except FileExistsError:
        part.unlink()
        os.utime(blob)  # fresh again: the orphan sweep's grace period covers this upload too
        return blob, False
    except OSError:  # a file system without hard links
        if blob.exists():
            part.unlink()
            os.utime(blob)
            return blob, False
        os.replace(part, blob)
        return blob, True
    part.unlink()
    return blob, True
