"""What a candidate stage is given and what it gives back: a private copy of the candidate-side
source (``runner/inside`` and core's standard-library part, nothing else of the runner), and its
output files, read as untrusted input. Both a stage's process (``candidate.py``) and a warm zygote
(``zygotes.py``) start from the same copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

from core import subjects

INSIDE_SRC = Path(__file__).parents[1] / "inside"
CORE_SRC = Path(subjects.__file__).parent
# What a candidate stage imports of core: standard library only
# (tests/functional/test_imports.py holds it).
CORE_FOR_CANDIDATE = (
    "__init__.py",
    "subjects.py",
    "declarations.py",
    "surface.py",
    "knob_effects.py",
    "kinds.py",
    "frontend_refusals.py",
    "comparable.py",
    "harness.py",
    "ledger.json",
)
MAX_DOC_BYTES = 64 << 20  # a stage's document; far above any real one


def digest() -> str:
    """Of the source a stage runs (``inside`` and the core modules it is given): a warm parent
    started from another is not the same parent."""
    h = hashlib.sha256()
    for path in sorted(INSIDE_SRC.rglob("*.py")):
        h.update(path.relative_to(INSIDE_SRC).as_posix().encode())
        h.update(path.read_bytes())
    for name in CORE_FOR_CANDIDATE:
        h.update(f"core/{name}".encode())
        h.update((CORE_SRC / name).read_bytes())
    return h.hexdigest()[:12]


def private_source(work_dir: Path) -> Path:
    """A copy of the candidate-side package: the candidate sees no other runner code."""
    root = work_dir / "src"
    if root.exists():
        shutil.rmtree(root)
    pkg = root / "runner"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copytree(INSIDE_SRC, pkg / "inside", ignore=shutil.ignore_patterns("__pycache__"))
    core = root / "core"
    core.mkdir()
    for name in CORE_FOR_CANDIDATE:
        shutil.copyfile(CORE_SRC / name, core / name)
    return root


def clear(path: Path) -> str:
    """Remove whatever the candidate left at ``path`` (a file, a link, a fifo, a folder: never
    followed); "", or why it could not be, in the candidate's name and without a host path."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"the candidate left {path.name} unreadable ({exc.strerror})"
    try:
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path)  # never follows a link inside
        else:
            os.unlink(path)
    except OSError as exc:
        return f"the candidate left {path.name} where the runner cannot remove it ({exc.strerror})"
    return ""


def read_untrusted(path: Path, limit: int = MAX_DOC_BYTES) -> bytes | str:
    """A file the candidate wrote, in a directory it owned: its bytes, or why it is refused.
    Opened without following a link, a regular file only, read only as far as ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder is refused before it is read
            return "not a regular file"
        raw = b""
        while len(raw) <= limit and (chunk := os.read(fd, limit + 1 - len(raw))):
            raw += chunk
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else f"larger than {limit} bytes"


def copy_doc(doc: Path, out_path: Path) -> None:
    """A warm stage's document (a file the worker's uid wrote) into ``out_path``, a file of the
    runner's; nothing when there is none to read."""
    data = "left in place" if clear(out_path) else read_untrusted(doc)
    if isinstance(data, bytes):
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as dst:
            dst.write(data)
