"""A wheel's RECORD against its contents: every member listed, every hash and size right.

The wheel spec lists each file of the archive in ``<name>.dist-info/RECORD`` with its hash and
size (RECORD itself and its signatures without). pip installs without checking them, so a wheel
edited after it was built (a version string changed by hand, a file swapped) would install and be
judged as if it were the build it claims to be. Every member is decompressed and hashed here, in
1 MiB chunks: the work is bounded by the archive's declared unpacked size, which the checks before
this one have capped, and ``zipfile`` never yields more than a member declares.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile

MAX_RECORD_BYTES = 8 * 1024**2  # 1.32.0's: 150 KB for 1,357 members
HASHES = ("sha256", "sha384", "sha512")  # the wheel spec's: at least as strong as sha256
_CHUNK = 1 << 20
_UNHASHED = ("RECORD", "RECORD.jws", "RECORD.p7s")


def validate_record(
    zf: zipfile.ZipFile, members: list[zipfile.ZipInfo], dist_info: str
) -> tuple[bool, str]:
    entries, reason = _read_record(zf, members, f"{dist_info}/RECORD")
    if entries is None:
        return False, reason
    for info in members:
        if info.is_dir():
            continue
        name = info.filename
        if name.startswith(f"{dist_info}/") and name.rpartition("/")[2] in _UNHASHED:
            continue
        entry = entries.pop(name, None)
        if entry is None:
            return False, f"member {name!r} is not listed in RECORD"
        ok, reason = _validate_entry(zf, info, *entry)
        if not ok:
            return False, reason
    missing = [n for n in entries if n.rpartition("/")[2] not in _UNHASHED]
    if missing:
        return False, f"RECORD lists {missing[0]!r}, which the archive does not have"
    return True, ""


def _read_record(
    zf: zipfile.ZipFile, members: list[zipfile.ZipInfo], wanted: str
) -> tuple[dict[str, tuple[str, str]] | None, str]:
    info = next((i for i in members if i.filename == wanted), None)
    if info is None:
        return None, f"the wheel has no {wanted}"
    if info.file_size > MAX_RECORD_BYTES:
        return None, f"RECORD declares {info.file_size} bytes; at most {MAX_RECORD_BYTES} allowed"
    with zf.open(info) as fh:
        text = fh.read(MAX_RECORD_BYTES + 1).decode("utf-8", errors="replace")
    entries: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if len(row) != 3:
            return None, f"RECORD row {row[:1]!r} does not have three fields"
        name, digest, size = row
        if name in entries:
            return None, f"RECORD lists {name!r} twice"
        entries[name] = (digest, size)
    return entries, ""


def _validate_entry(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, digest: str, size: str
) -> tuple[bool, str]:
    name = info.filename
    algorithm, _, expected = digest.partition("=")
    if algorithm not in HASHES or not expected:
        return False, f"RECORD gives {name!r} no sha256 (or stronger) hash"
    if size and size != str(info.file_size):
        return False, f"RECORD says {name!r} is {size} bytes; the archive says {info.file_size}"
    hasher = hashlib.new(algorithm)
    with zf.open(info) as fh:
        while chunk := fh.read(_CHUNK):
            hasher.update(chunk)
    actual = base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
    if actual != expected.rstrip("="):
        return False, f"member {name!r} does not match its RECORD hash"
    return True, ""
