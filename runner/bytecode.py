"""Byte-code for the candidate's modules, written once per job by the runner.

Every stage of a job starts a process that imports the candidate's wrappers: the probe, the
determinism stage and the processes it starts (sm_100a compile-only workers, the compile-ahead
process), numerics, refusal, and the forks of a warm parent. The candidate is installed without
byte-code (compiling all of a release is 1066 files and 5 s of CPU for 1.32.0) and its stages
write none (``PYTHONDONTWRITEBYTECODE``), so each of those processes compiled the same sources
again: 149 files and 4.6 MB of 1.32.0's Python, 0.66 s of CPU, every time.

After the probe, the runner compiles the files the probe says it imported (its document's
``imported``, relative to the site directory), once: every later stage imports the same
wrappers and loads their byte-code instead. The list is the candidate's output, so it only
steers which files are compiled, within bounds: a relative path inside the job's own
site-packages, a regular ``.py`` file (no link out of it), at most ``MAX_FILES`` files and
``MAX_FILE_BYTES`` each, ``MAX_BYTES`` in all. Compiling parses the source and runs none of it.
The byte-code is checked against the source's size and time by every import, as any is, and is
written only where the candidate's interpreter is this one (the same magic number), through
directory descriptors opened without following links, so a link the candidate planted (a
``__pycache__`` pointing elsewhere) makes the runner write nothing outside the site.
"""

from __future__ import annotations

import logging
import marshal
import os
import stat
import struct
import sys
import time
from dataclasses import dataclass
from importlib.util import MAGIC_NUMBER, cache_from_source
from pathlib import Path

log = logging.getLogger("fe_ci.bytecode")

MAX_FILES = 5000
MAX_FILE_BYTES = 8 << 20
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Compiled:
    files: int = 0
    seconds: float = 0.0
    skipped: int = 0  # named but refused (outside the site, not a file, over a bound, bad syntax)


def _source(site: Path, name: object) -> Path | None:
    """``site/name`` where ``name`` is a plain relative path to a regular ``.py`` file in it."""
    if not isinstance(name, str) or not name.endswith(".py") or "\0" in name:
        return None
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        return None
    path = site / rel
    try:
        info = os.lstat(path)
        parent = path.parent.resolve(strict=True)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or not parent.is_relative_to(site.resolve()):
        return None
    return path if info.st_size <= MAX_FILE_BYTES else None


_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _write_pyc(path: Path) -> None:
    """``path``'s byte-code beside it (PEP 552, checked by time and size), written atomically."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            source = f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(source) != info.st_size:
        raise ValueError("changed while read")
    code = compile(source, str(path), "exec", dont_inherit=True)
    head = struct.pack("<4sIII", MAGIC_NUMBER, 0, int(info.st_mtime) & 0xFFFFFFFF,
                       info.st_size & 0xFFFFFFFF)  # fmt: skip
    target = Path(cache_from_source(str(path)))
    parent = os.open(path.parent, _NOFOLLOW_DIR)
    try:
        try:
            os.mkdir(target.parent.name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
        cache = os.open(target.parent.name, _NOFOLLOW_DIR, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        tmp = f".{target.name}.{os.getpid()}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                      dir_fd=cache)  # fmt: skip
        try:
            with os.fdopen(out, "wb") as f:
                f.write(head + marshal.dumps(code))
            os.replace(tmp, target.name, src_dir_fd=cache, dst_dir_fd=cache)
        except BaseException:
            os.unlink(tmp, dir_fd=cache)
            raise
    finally:
        os.close(cache)


def compile_imported(site: Path, names: object) -> Compiled:
    """Write the byte-code of ``names`` (the probe's ``imported``) under ``site``."""
    if site.parent.name != f"python{sys.version_info.major}.{sys.version_info.minor}":
        return Compiled()  # another interpreter's magic number
    if not isinstance(names, list):
        return Compiled()
    start, files, skipped, total = time.monotonic(), 0, 0, 0
    for name in names[:MAX_FILES]:
        path = _source(site, name)
        if path is None or total + path.stat().st_size > MAX_BYTES:
            skipped += 1
            continue
        total += path.stat().st_size
        try:
            _write_pyc(path)
        except (OSError, ValueError, SyntaxError, RecursionError, MemoryError):
            skipped += 1
            continue
        files += 1
    skipped += max(0, len(names) - MAX_FILES)
    done = Compiled(files, time.monotonic() - start, skipped)
    if files:
        os.utime(site)  # a warm parent links the job's files again, byte-code included
    log.info(
        "event=candidate_bytecode files=%d skipped=%d bytes=%d seconds=%.2f",
        done.files,
        done.skipped,
        total,
        done.seconds,
    )
    return done
