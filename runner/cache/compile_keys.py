"""The compile cache's keys: what a candidate's compiled kernels depend on, computed by the runner
outside the sandbox from the files the candidate installed (a candidate never names its cache).

Two keys. ``CacheKey`` is the whole candidate: every installed file by content, the CuTe DSL's
distributions, the arch, torch, Python and the subjects' definitions; only a build with identical
files reads it. ``SourceKey`` leaves out what no kernel is compiled from (the native extension
modules, prose): two builds whose C++ extension or docs differ share it. Every byte that can run
counts: nothing a candidate can extend is normalized. The one exception is the version label, and
only as an exact string literal assignment on a line of its own (``__version__ = "1.32.0"``): a
re-labelled wheel keeps its kernels, while a line that does anything more (``__version__ =
"1.32.0"; exec(...)``) is hashed as it is. Byte code (``__pycache__``, ``.pyc``) counts like any
file: a candidate is installed without byte-compiling, so a ``.pyc`` it ships is what runs. What a
candidate can make the runner read here is bounded (hostile input).
``runner/cache/compile_cache.py`` keeps the entries under these keys.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from core.subjects import SUBJECTS

log = logging.getLogger("fe_ci.compile_cache")

CANDIDATE_DIST = "nvidia-cudnn-frontend"
DSL_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base")
SUBJECTS_SRC = (
    Path(__file__).parents[1] / "inside" / "subjects"
)  # dtypes and configs of the kernels
# Bounds on what a candidate can make the runner read (hostile input).
MAX_SOURCE_FILES = 20_000
MAX_SOURCE_BYTES = 2 << 30
MAX_ENTRY_POINTS = 1 << 20  # characters of entry_points.txt read

# The version a build reports is a label: a re-labelled wheel with the same code keeps its kernels.
# Only a whole line that is exactly the assignment of a plain string literal is a label: no
# indentation, no annotation, no other statement, no escape, no second string (hostile input).
_LABEL = rb"[0-9A-Za-z.+!_-]{1,64}"
_VERSION_LINE = re.compile(rb'^__version__ = (?:"' + _LABEL + rb'"|\'' + _LABEL + rb"')$", re.M)
VERSION_LABEL = b"__version__ = <label>"
# Files of the candidate that no persisted kernel is compiled from: its native extension modules
# (the cuDNN graph API's bindings: the CuTe DSL compiles Python, and JIT-compiled CUDA sources
# ship as .cu/.cpp/.h files, which count) and its prose.
NOT_KERNEL_SOURCES = (".so", ".pyd", ".dylib", ".dll", ".md", ".rst")
SOURCE_KEY_PREFIX = "src-"  # source keys and whole-candidate keys never share a directory


@dataclass(frozen=True)
class CacheKey:
    """What a compiled kernel depends on. Every field is computed by the runner."""

    sources: str  # the candidate distribution's installed files, by content
    dsl: str  # the CuTe DSL's distributions: versions and RECORDs
    arch: str  # family and GPU model of the host that compiles
    torch: str | None
    python: str
    subjects: str  # the runner's subject definitions: the dtypes and configs compiled

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()[:32]


@dataclass(frozen=True)
class SourceKey:
    """What the candidate's kernels are compiled from, and nothing else of the candidate: its
    kernel sources (every installed file but native extension modules and prose), the DSL, the
    arch, torch, Python and the subjects' options. Two builds whose C++ extension or docs
    differ share it."""

    kernels: str
    dsl: str
    arch: str
    torch: str | None
    python: str
    subjects: str

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True).encode()
        return SOURCE_KEY_PREFIX + hashlib.sha256(text).hexdigest()[:28]


class TooLarge(Exception):
    pass


def _hash_tree(
    hashers: list[tuple[hashlib._Hash, tuple[str, ...]]], base: Path, rel: str, budget: list[int]
) -> None:
    """Add ``base/rel`` (a file, or every file under a directory) by relative path and content
    to each hasher, but not files whose names end with one of that hasher's skipped suffixes.
    Each file is read once, whichever hashers take it."""
    path = base / rel
    is_dir = path.is_dir()
    takers = [h for h, skip in hashers if is_dir or not (skip and rel.endswith(skip))]
    if not takers:
        return
    if path.is_symlink():
        for h in takers:
            h.update(f"L {rel} -> {os.readlink(path)}\0".encode())
        return
    if is_dir:
        for child in sorted(os.listdir(path)):  # __pycache__ too: Python runs what it finds there
            _hash_tree(hashers, base, f"{rel}/{child}", budget)
        return
    if not path.is_file():
        return
    budget[0] -= 1
    budget[1] -= path.stat().st_size
    if budget[0] < 0 or budget[1] < 0:
        raise TooLarge(f"more than {MAX_SOURCE_FILES} files or {MAX_SOURCE_BYTES} bytes")
    data = path.read_bytes()
    if rel.endswith(".py") and b"__version__" in data:  # the search alone, in every file, cost
        data = _VERSION_LINE.sub(VERSION_LABEL, data)  # more than the hashing
    for h in takers:
        h.update(f"F {rel} {len(data)}\0".encode())
        h.update(data)


def _top_level(dist: md.Distribution) -> list[str]:
    """The top-level names a distribution installed (packages, modules, .pth files)."""
    names = set()
    for f in dist.files or ():
        parts = Path(str(f)).parts
        if not parts or parts[0] in ("..", "/") or parts[0].endswith(".dist-info"):
            continue
        names.add(parts[0])
    return sorted(names)


def source_digests(dist: md.Distribution, skips: list[tuple[str, ...]]) -> list[str]:
    """For each of ``skips``: every installed file of the distribution but its ``.dist-info``
    (metadata, not code) and those whose names end with one of those suffixes; of the
    ``.dist-info``, its entry points (torch imports and calls the ``torch.backends`` group's at
    ``import torch``: they choose what runs). One walk and one read of each file for all of them.

    Walked on disk rather than trusted from RECORD: a file the candidate installed is hashed
    whether RECORD lists it or not.
    """
    base = Path(str(dist.locate_file(""))).resolve()
    hashers = [(hashlib.sha256(), skip) for skip in skips]
    budget = [MAX_SOURCE_FILES, MAX_SOURCE_BYTES]
    for top in _top_level(dist):
        _hash_tree(hashers, base, top, budget)
    entry_points = (dist.read_text("entry_points.txt") or "")[:MAX_ENTRY_POINTS]
    for h, _ in hashers:
        h.update(f"E {len(entry_points)}\0{entry_points}".encode())
    return [h.hexdigest() for h, _ in hashers]


def source_digest(dist: md.Distribution, skip: tuple[str, ...] = ()) -> str:
    """``source_digests`` for one set of skipped suffixes."""
    return source_digests(dist, [skip])[0]


def _dist(name: str, dirs: list[Path]) -> md.Distribution | None:
    found = list(md.distributions(name=name, path=[str(d) for d in dirs]))
    return found[0] if found else None


def _subjects_digest() -> str:
    """The subject harnesses and the configs they compile (each module's declaration names them)."""
    h = hashlib.sha256()
    for path in sorted(SUBJECTS_SRC.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    configs = {name: [[c, dict(p)] for c, p in s.configs] for name, s in SUBJECTS.items()}
    h.update(json.dumps(configs, sort_keys=True).encode())
    return h.hexdigest()


def compute_keys(
    dirs: list[Path], *, family: str | None, gpu: str | None
) -> tuple[CacheKey, SourceKey] | None:
    """The whole-candidate key and the source key of a candidate installed in ``dirs``; None
    when there is nothing to key on."""
    candidate = _dist(CANDIDATE_DIST, dirs)
    if candidate is None:
        return None
    try:
        sources, kernels = source_digests(candidate, [(), NOT_KERNEL_SOURCES])
    except (OSError, TooLarge) as exc:
        log.warning("event=compile_cache_unkeyed reason=%s", exc)
        return None
    dsl = hashlib.sha256()
    for name in DSL_DISTS:
        d = _dist(name, dirs)
        dsl.update(f"{name}={d.version if d else 'absent'};".encode())
        dsl.update(((d.read_text("RECORD") if d else "") or "").encode())
    torch = _dist("torch", dirs)
    whole = CacheKey(
        sources=sources,
        dsl=dsl.hexdigest(),
        arch=f"{family or 'none'} {gpu or 'none'}",
        torch=torch.version if torch else None,
        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        subjects=_subjects_digest(),
    )
    by_source = SourceKey(
        kernels=kernels,
        dsl=whole.dsl,
        arch=whole.arch,
        torch=whole.torch,
        python=whole.python,
        subjects=whole.subjects,
    )
    return whole, by_source


def interpreter_sites(python: Path) -> list[Path]:
    """Site directories of another interpreter, asked with ``-I -S``: no ``.pth`` file runs."""
    code = (
        "import json, sysconfig; "
        "print(json.dumps([sysconfig.get_path(k) for k in ('purelib', 'platlib')]))"
    )
    try:
        out = subprocess.run(
            [str(python), "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30
        ).stdout
        return [Path(p) for p in dict.fromkeys(json.loads(out)) if p]
    except (OSError, ValueError, subprocess.SubprocessError):
        return []
