"""Is this file a frontend wheel? Checks on the stored upload, from its central directory.

The zip's end record says where the central directory is and how large it is; Python's
``zipfile`` then reads that many bytes and builds one object per entry, whatever the end record's
member count says. So the directory is bounded in bytes first, then walked here entry by entry,
counting, and the walk stops at the member cap or past the count the end record declares; only a
directory that passes is handed to ``zipfile``. Sizes as declared in the directory then bind
``zipfile`` (and so pip: a member never yields more than its declared size); METADATA and WHEEL
are read with a bound, and last every member is hashed against RECORD
(``service.uploads.wheelrecord``).
"""

from __future__ import annotations

import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from service.errors import BadWheelName, NotAWheel, UnsafeWheel, UploadError, WrongDistribution
from service.uploads.wheelrecord import validate_record

DISTRIBUTION = "nvidia-cudnn-frontend"
MAX_UNPACKED_BYTES = 4 * 1024**3  # 1.32.0 unpacks to 49 MB
MAX_MEMBERS = 20_000  # 1.32.0 has 1,357; checking 20,000 (RECORD too) costs about 25 MB
MAX_DIRECTORY_BYTES = 4 * 1024**2  # 1.32.0's central directory: 124 KB (91 bytes a member)
MAX_MEMBER_RATIO = 100.0  # 1.32.0's most compressible member: 12x
MAX_TOTAL_RATIO = 25.0  # 1.32.0 as a whole: 4.3x
MEMBER_RATIO_FLOOR = 1024**2  # smaller members may compress well; only their total counts
TOTAL_RATIO_FLOOR = 16 * 1024**2
MAX_META_BYTES = 4 * 1024**2  # METADATA (with its long description) and WHEEL


def check_filename(filename: str) -> str:
    """Raise if the file name is no frontend wheel's; return the version it names."""
    _guard(_validate_filename(filename), BadWheelName, "filename", filename)
    name, version, _build, _tags = parse_wheel_filename(filename)
    _guard(_validate_name(name, "the file name"), WrongDistribution, "distribution", filename)
    return str(version)


def check_wheel(path: Path, filename: str, version: Version, max_unpacked: int) -> tuple[str, str]:
    """Raise the first check that fails; return the (distribution, version) of a good wheel."""
    directory, reason = _read_directory(path)
    _guard((directory is not None, reason), NotAWheel, "zip", filename)
    assert directory is not None
    _guard(_validate_directory_size(directory), UnsafeWheel, "directory_size", filename)
    _guard(_validate_member_count(path, directory), UnsafeWheel, "member_count", filename)
    try:
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
            _guard(_validate_member_names(members), UnsafeWheel, "member_name", filename)
            _guard(_validate_member_types(members), UnsafeWheel, "member_type", filename)
            _guard(_validate_member_ratios(members), UnsafeWheel, "member_ratio", filename)
            _guard(_validate_total_ratio(members), UnsafeWheel, "total_ratio", filename)
            _guard(_validate_unpacked(members, max_unpacked), UnsafeWheel, "unpacked", filename)
            dirs = _dist_info_dirs(members)
            _guard(_validate_dist_info(dirs, version), NotAWheel, "dist_info", filename)
            wheel, reason = _read_headers(zf, members, f"{dirs[0]}/WHEEL")
            _guard((wheel is not None, reason), NotAWheel, "wheel_file", filename)
            assert wheel is not None
            _guard(_validate_wheel_version(wheel), NotAWheel, "wheel_version", filename)
            meta, reason = _read_headers(zf, members, f"{dirs[0]}/METADATA")
            _guard((meta is not None, reason), NotAWheel, "metadata", filename)
            assert meta is not None
            _guard(validate_record(zf, members, dirs[0]), NotAWheel, "record", filename)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        OSError,
        EOFError,
        struct.error,
        zlib.error,
        NotImplementedError,
        RuntimeError,
    ) as exc:
        raise NotAWheel(
            f"the file is not a readable zip: {exc}",
            detail={"check": "zip_read", "filename": filename},
        ) from exc
    meta_name = str(meta.get("Name", ""))
    _guard(_validate_name(meta_name, "METADATA"), WrongDistribution, "metadata_name", filename)
    _guard(_validate_metadata_version(meta, version), NotAWheel, "metadata_version", filename)
    return canonicalize_name(meta_name), str(version)


def _guard(result: tuple[bool, str], error: type[UploadError], check: str, filename: str) -> None:
    ok, reason = result
    if not ok:
        raise error(reason, detail={"check": check, "filename": filename})


_SAFE_FILENAME = re.compile(r"^[A-Za-z0-9._+!-]+$")


def _validate_filename(filename: str) -> tuple[bool, str]:
    if not filename.endswith(".whl"):
        return False, f"file name {filename!r} does not end in .whl"
    if "/" in filename or "\\" in filename:
        return False, f"file name {filename!r} contains a path separator"
    if len(filename) > 255 or not _SAFE_FILENAME.match(filename):
        return False, f"file name {filename!r} has characters a wheel name cannot have"
    try:
        parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        return False, f"file name {filename!r} is not a PEP 427 wheel name: {exc}"
    return True, ""


def _validate_name(name: str, where: str) -> tuple[bool, str]:
    if canonicalize_name(name) != DISTRIBUTION:
        return False, f"{where} names distribution {name!r}, expected {DISTRIBUTION}"
    return True, ""


_EOCD, _EOCD64_LOCATOR, _EOCD64 = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_EOCD_SIZE, _EOCD64_SIZE, _LOCATOR_SIZE, _ENTRY_SIZE = 22, 56, 20, 46
_ENTRY = b"PK\x01\x02"


@dataclass(frozen=True)
class Directory:
    """The central directory as ``zipfile`` will find it: where, how many bytes, what count the
    end record declares."""

    start: int
    size: int
    declared: int


def _read_directory(path: Path) -> tuple[Directory | None, str]:
    """Locate the central directory the way ``zipfile`` does (the end record without a comment,
    else the last one in the final 64 KiB; a zip64 record and locator just before it; the
    directory just before those, whatever offset the record names), reading only the end."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - (_EOCD_SIZE + 0xFFFF)))
        tail = fh.read()
        at = len(tail) - _EOCD_SIZE
        if at < 0 or tail[at : at + 4] != _EOCD or tail[-2:] != b"\x00\x00":
            at = tail.rfind(_EOCD)
        if at < 0 or len(tail) - at < _EOCD_SIZE:
            return None, "the file is not a zip archive (no end of central directory record)"
        eocd_pos = size - len(tail) + at
        count, cd_size = struct.unpack("<HL", tail[at + 10 : at + 16])
        start = eocd_pos - cd_size
        if eocd_pos >= _LOCATOR_SIZE + _EOCD64_SIZE:
            fh.seek(eocd_pos - _LOCATOR_SIZE - _EOCD64_SIZE)
            record = fh.read(_EOCD64_SIZE + _LOCATOR_SIZE)
            if record[-_LOCATOR_SIZE:][:4] == _EOCD64_LOCATOR and record[:4] == _EOCD64:
                count, cd_size = struct.unpack("<QQ", record[32:48])
                start = eocd_pos - _LOCATOR_SIZE - _EOCD64_SIZE - cd_size
    if start < 0:
        return None, "the end record places the central directory before the file's start"
    return Directory(start, cd_size, count), ""


def _validate_directory_size(directory: Directory) -> tuple[bool, str]:
    if directory.size > MAX_DIRECTORY_BYTES:
        return False, (
            f"the central directory is {directory.size} bytes; at most "
            f"{MAX_DIRECTORY_BYTES} are allowed"
        )
    return True, ""


def _validate_member_count(path: Path, directory: Directory) -> tuple[bool, str]:
    """Walk the directory's bytes entry by entry, as ``zipfile`` will, and count: stop past the
    member cap or past the count the end record declares."""
    cap = min(MAX_MEMBERS, directory.declared)
    entries = walked = 0
    with path.open("rb") as fh:
        fh.seek(directory.start)
        while walked < directory.size:
            head = fh.read(_ENTRY_SIZE)
            if len(head) < _ENTRY_SIZE or head[:4] != _ENTRY:
                return False, f"central directory entry {entries + 1} is corrupt"
            name, extra, comment = struct.unpack("<HHH", head[28:34])
            fh.seek(name + extra + comment, 1)
            walked += _ENTRY_SIZE + name + extra + comment
            entries += 1
            if entries > cap:
                break
    if entries > MAX_MEMBERS:
        return False, f"the archive has more than {MAX_MEMBERS} members; that is the limit"
    if entries != directory.declared:
        return False, (
            f"the central directory holds {'more than ' if entries > cap else ''}{entries} "
            f"entries but the end record says {directory.declared}"
        )
    return True, ""


_DRIVE = re.compile(r"^[A-Za-z]:")


def _validate_member_names(members: list[zipfile.ZipInfo]) -> tuple[bool, str]:
    seen: set[str] = set()
    for info in members:
        name = info.orig_filename
        if "\x00" in name:
            return False, f"member {name!r} contains a NUL character"
        if name.startswith("/"):
            return False, f"member {name!r} is an absolute path"
        if "\\" in name:
            return False, f"member {name!r} contains a backslash"
        if _DRIVE.match(name):
            return False, f"member {name!r} names a drive"
        if ".." in name.split("/"):
            return False, f"member {name!r} escapes the wheel"
        if name in seen:
            return False, f"member {name!r} appears more than once"
        seen.add(name)
    return True, ""


def _validate_member_types(members: list[zipfile.ZipInfo]) -> tuple[bool, str]:
    for info in members:
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            return False, f"member {info.filename!r} is a symbolic link"
        if info.flag_bits & 0x1:
            return False, f"member {info.filename!r} is encrypted"
    return True, ""


def _ratio(unpacked: int, packed: int) -> float:
    return unpacked / packed if packed else float("inf")


def _validate_member_ratios(members: list[zipfile.ZipInfo]) -> tuple[bool, str]:
    for info in members:
        ratio = _ratio(info.file_size, info.compress_size)
        if info.file_size >= MEMBER_RATIO_FLOOR and ratio > MAX_MEMBER_RATIO:
            return False, (
                f"member {info.filename!r} would unpack from {info.compress_size} to "
                f"{info.file_size} bytes (ratio {ratio:.0f}, at most {MAX_MEMBER_RATIO:.0f})"
            )
    return True, ""


def _validate_total_ratio(members: list[zipfile.ZipInfo]) -> tuple[bool, str]:
    unpacked = sum(info.file_size for info in members)
    packed = sum(info.compress_size for info in members)
    ratio = _ratio(unpacked, packed)
    if unpacked >= TOTAL_RATIO_FLOOR and ratio > MAX_TOTAL_RATIO:
        return False, (
            f"the archive would unpack from {packed} to {unpacked} bytes "
            f"(ratio {ratio:.0f}, at most {MAX_TOTAL_RATIO:.0f})"
        )
    return True, ""


def _validate_unpacked(members: list[zipfile.ZipInfo], cap: int) -> tuple[bool, str]:
    unpacked = sum(info.file_size for info in members)
    if unpacked > cap:
        return False, f"the archive would unpack to {unpacked} bytes; the limit is {cap}"
    return True, ""


def _dist_info_dirs(members: list[zipfile.ZipInfo]) -> list[str]:
    tops = {info.filename.split("/", 1)[0] for info in members if "/" in info.filename}
    return sorted(top for top in tops if top.endswith(".dist-info"))


def _validate_dist_info(found: list[str], version: Version) -> tuple[bool, str]:
    if not found:
        return False, "the archive has no .dist-info directory"
    if len(found) > 1:
        return False, f"the archive has {len(found)} .dist-info directories: {', '.join(found)}"
    stem = found[0].removesuffix(".dist-info")
    dist, _, ver = stem.rpartition("-")
    try:
        same = canonicalize_name(dist) == DISTRIBUTION and Version(ver) == version
    except InvalidVersion:
        same = False
    if not same:
        return False, (
            f"directory {found[0]!r} does not match the file name ({DISTRIBUTION} {version})"
        )
    return True, ""


def _read_headers(
    zf: zipfile.ZipFile, members: list[zipfile.ZipInfo], wanted: str
) -> tuple[Message | None, str]:
    """The RFC 822 headers of member ``wanted``, decompressing at most MAX_META_BYTES."""
    directory, _, leaf = wanted.rpartition("/")
    info = next((i for i in members if i.filename == wanted), None)
    if info is None:
        return None, f"the wheel has no {leaf} in {directory}/"
    if info.file_size > MAX_META_BYTES:
        return None, f"{leaf} declares {info.file_size} bytes; at most {MAX_META_BYTES} allowed"
    try:
        with zf.open(info) as fh:
            raw = fh.read(MAX_META_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, EOFError, RuntimeError, NotImplementedError, ValueError, zlib.error) as exc:
        return None, f"{leaf} cannot be read: {exc}"
    return HeaderParser().parsestr(text), ""


def _validate_wheel_version(wheel: Message) -> tuple[bool, str]:
    declared = str(wheel.get("Wheel-Version", "")).strip()
    if not declared:
        return False, "WHEEL has no Wheel-Version"
    if declared.split(".")[0] != "1":
        return False, f"WHEEL declares Wheel-Version {declared}; only 1.x is understood"
    return True, ""


def _validate_metadata_version(meta: Message, version: Version) -> tuple[bool, str]:
    declared = str(meta.get("Version", "")).strip()
    try:
        same = Version(declared) == version
    except InvalidVersion:
        same = False
    if not same:
        return False, f"METADATA says version {declared!r} but the file name says {version}"
    return True, ""
