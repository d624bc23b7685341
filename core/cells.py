"""The matrix: a build's GPU work as cells (family x cuDNN backend), and jobs matched by labels.

A cell is one GPU family on one cuDNN backend. Its name is what every reader keys by: GitHub's
per-job context (``fe-ci/<cell>``), the gate's names (``--require``, ``FE_CI_REQUIRE``), the
comparison pins and the series of the trends. The host's own backend keeps the family's name
(``sm_90``), so every name made before the matrix stays what it was; another backend adds it
(``sm_90-cudnn9.28.1``: letters, digits, ``_``, ``-`` and ``.``, valid in a GitHub context, a
URL path and a comma-separated list alike).

A job carries requirements, a runner offers labels, and a runner takes a job whose requirements
its labels satisfy (as Buildkite's agent tags and Actions' ``runs-on``): ``arch=sm_90`` needs that
label's value, ``builder`` needs the label set to a true value, and a runner's value ``*`` (or a
``|``-separated list) offers every value (or those). Requirements travel as one canonical text
(``arch=sm_90,cudnn=9.28.1``), so the service's queue can select by it.

The known backends are the versions of ``nvidia-cudnn-cu12`` and ``nvidia-cudnn-cu13`` listed in
``cudnn_backends.json`` (refreshed by ``python -m core.cells --refresh``, which asks the package
index with pip).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HOST = "host"  # the backend the runner host has: no layer, the host's libcudnn
CUDNN = "cudnn"  # the matrix axis, and the label and requirement key of a backend
ARCH = "arch"
BUILDER = "builder"
AXES = (CUDNN,)
DEFAULT_MATRIX = f"{CUDNN}={HOST}"
ANY_VALUE = "*"
BACKENDS_PATH = Path(__file__).with_name("cudnn_backends.json")
PACKAGES = ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
CELL_CHARS = 48

_CELL = re.compile(r"^(?P<family>sm_\d{2,3})(?:-cudnn(?P<cudnn>\d+(?:\.\d+){1,3}))?$")
_VERSION = re.compile(r"^\d+(?:\.\d+){1,3}$")
_TRUE = ("1", "true", "yes")


@dataclass(frozen=True, order=True)
class Cell:
    """One GPU family on one cuDNN backend (``HOST``: the runner host's own)."""

    family: str
    cudnn: str = HOST

    @property
    def name(self) -> str:
        return self.family if self.cudnn == HOST else f"{self.family}-{CUDNN}{self.cudnn}"

    @property
    def requirements(self) -> dict[str, str]:
        """What a runner must offer: its family, and a backend other than the host's."""
        reqs = {ARCH: self.family}
        if self.cudnn != HOST:
            reqs[CUDNN] = self.cudnn
        return reqs

    @classmethod
    def parse(cls, name: str) -> Cell:
        """The cell a name says; ``ValueError`` for anything else."""
        match = _CELL.match(name or "")
        if match is None:
            raise ValueError(f"{name!r} is not a cell name (sm_90, or sm_90-cudnn9.28.1)")
        return cls(match["family"], match["cudnn"] or HOST)


def is_cell(name: str) -> bool:
    return _CELL.match(name or "") is not None


def family_of(name: str | None) -> str | None:
    """The family of a cell name (a family's own name is its host cell's); None if not one."""
    match = _CELL.match(name or "")
    return match["family"] if match else None


# ---------------------------------------------------------------------------- labels


def requires_text(requirements: Mapping[str, str]) -> str:
    """The canonical text of requirements: sorted ``key=value`` (``key`` alone for a flag)."""
    return ",".join(f"{k}={v}" if v else k for k, v in sorted(requirements.items()))


def parse_requires(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if part.strip():
            key, _, value = part.strip().partition("=")
            out[key] = value
    return out


def satisfied(requirements: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a runner offering ``labels`` may take a job requiring ``requirements``."""
    for key, want in requirements.items():
        have = labels.get(key)
        if have is None:
            return False
        if not want:  # a flag: set to a true value
            if have.strip().lower() not in _TRUE:
                return False
            continue
        offered = [v.strip() for v in have.split("|")]
        if ANY_VALUE not in offered and want not in offered:
            return False
    return True


# ---------------------------------------------------------------------------- the matrix


@cache
def known_backends() -> dict[str, tuple[str, ...]]:
    """``{package: versions}`` from ``cudnn_backends.json``, oldest first."""
    doc = json.loads(BACKENDS_PATH.read_text())
    return {p: tuple(doc["packages"][p]) for p in PACKAGES}


def known_names() -> list[str]:
    """Every backend name the matrix accepts: each release's ``major.minor.patch`` (and the
    package's full version), in release order."""
    seen: dict[str, None] = {}
    for versions in known_backends().values():
        for v in versions:
            seen.setdefault(".".join(v.split(".")[:3]), None)
    return sorted(seen, key=lambda v: tuple(int(p) for p in v.split(".")))


def is_known(version: str) -> bool:
    if version in known_names():
        return True
    return any(version in versions for versions in known_backends().values())


def parse_matrix(text: str | None) -> dict[str, tuple[str, ...]]:
    """``cudnn=host,9.28.1`` as ``{"cudnn": ("host", "9.28.1")}``; axes are separated by ``;``.

    ``ValueError`` names an unknown axis, or an unknown backend with the known ones listed.
    """
    text = (text or "").strip() or DEFAULT_MATRIX
    out: dict[str, tuple[str, ...]] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        key, eq, values = part.partition("=")
        key = key.strip()
        if not eq or key not in AXES:
            raise ValueError(f"unknown matrix axis {key!r} in {text!r}; known: {', '.join(AXES)}")
        items = list(dict.fromkeys(v.strip() for v in values.split(",") if v.strip()))
        if not items:
            raise ValueError(f"the matrix axis {key!r} has no values")
        bad = [v for v in items if v != HOST and not (_VERSION.match(v) and is_known(v))]
        if bad:
            raise ValueError(
                f"unknown cuDNN backend(s) {', '.join(bad)}; known: {HOST}, "
                + ", ".join(known_names())
            )
        out[key] = tuple(items)
    return out or {CUDNN: (HOST,)}


def expand(families: Iterable[str], matrix: Mapping[str, tuple[str, ...]]) -> list[Cell]:
    """One cell per family x backend, families in the order given, the host's backend first."""
    backends = matrix.get(CUDNN) or (HOST,)
    return [Cell(f, b) for f in families for b in backends]


def backend_requirement(version: str, cuda_major: int) -> str:
    """The wheel of a backend for a torch of CUDA ``cuda_major``: ``nvidia-cudnn-cu13==9.28.1.*``
    (a full four-part version exactly)."""
    package = f"nvidia-cudnn-cu{cuda_major}"
    exact = version.count(".") >= 3
    return f"{package}=={version}" if exact else f"{package}=={version}.*"


def _refresh() -> None:  # pragma: no cover - asks the index; run by hand
    import subprocess
    import sys

    from packaging.version import Version

    packages: dict[str, list[str]] = {}
    for package in PACKAGES:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", package],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("Available versions:"))
        versions = [v.strip() for v in line.split(":", 1)[1].split(",")]
        kept = (v for v in versions if Version(v) >= Version("9.12"))
        packages[package] = sorted(kept, key=Version)
    import datetime

    doc = {"refreshed": datetime.date.today().isoformat(), "packages": packages}
    BACKENDS_PATH.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if sys.argv[1:] == ["--refresh"]:
        _refresh()
    print("\n".join(known_names()))
