"""Dependency layers: a candidate's declared dependencies, installed once per resolved set.

A layer is keyed by what decides its contents: the candidate's ``Requires-Dist`` lines with the
extras the runner installs (markers evaluated with ``packaging``), the host torch version, the
Python, the index or wheelhouse and the installer. It is built once under the runner's cache dir
(in a temporary directory, renamed into place, under a file lock so two runners never build the
same layer twice), checked (its requirements hold against the host torch; it never contains the
frontend itself) and then only read: each job's fresh venv sees it through a ``.pth`` line and
installs the candidate wheel alone, with ``--no-deps``. No candidate's files ever serve another
candidate; only their shared dependencies do.

Their uses are stamped and their total size bounded by ``runner/envs/layer_use.py``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from runner.isolation import allowlist, jail, sandbox

FRONTEND = "nvidia-cudnn-frontend"
LAYER_FORMAT = 2  # 2: layers hold bytecode
LAYER_PTH = "_fe_ci_0_layer.pth"  # sorts before the host-torch line: the layer wins over the host
KEY = re.compile(r"^[0-9a-f]{20}$")  # a layer's directory name
_DIST_DIR = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-py[^-]*)?\.(?:dist|egg)-info$")


class LayerError(Exception):
    """The layer could not be built or must not be used; the message says why."""


@dataclass(frozen=True)
class LayerSpec:
    requirements: tuple[str, ...]  # sorted, markers already evaluated (and removed)
    torch: str | None
    python: str
    source: str
    installer: str
    format: int = LAYER_FORMAT
    # installed without its dependencies, which the host's torch environment provides: a cuDNN
    # backend wheel requires the CUDA libraries (nvidia-cublas) that torch brings already
    host_deps: bool = False

    @property
    def key(self) -> str:
        fields = asdict(self)
        if not fields["host_deps"]:  # keys of layers built before the field stay as they were
            del fields["host_deps"]
        blob = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:20]


@dataclass(frozen=True)
class Layer:
    root: Path
    spec: LayerSpec
    built_s: float | None  # None: reused as found

    @property
    def site_packages(self) -> Path:
        major, minor = sys.version_info[:2]
        return self.root / "venv" / "lib" / f"python{major}.{minor}" / "site-packages"


def python_id() -> str:
    impl = sys.implementation.name
    return f"{impl}-{platform.python_version()}-{platform.machine()}-{sys.abiflags or '_'}"


def resolved_requirements(requires: tuple[str, ...], extras: list[str]) -> tuple[str, ...]:
    """The candidate's requirements that apply here, markers evaluated, as sorted strings.

    An extra that names the candidate itself (``nvidia-cudnn-frontend[x]; extra == "all"``)
    widens the extras; the candidate is never one of its own dependencies.
    """
    parsed: list[Requirement] = []
    for line in requires:
        try:
            parsed.append(Requirement(line))
        except InvalidRequirement as exc:
            raise LayerError(f"unreadable Requires-Dist {line!r}: {exc}") from exc
    active = set(extras)
    while True:  # extras that pull in further extras of the candidate itself
        grown = set(active)
        for req in parsed:
            if canonicalize_name(req.name) == FRONTEND and _applies(req, active):
                grown |= set(req.extras)
        if grown == active:
            break
        active = grown
    out: set[str] = set()
    for req in parsed:
        if canonicalize_name(req.name) == FRONTEND or not _applies(req, active):
            continue
        text: str = canonicalize_name(req.name)
        if req.extras:
            text += f"[{','.join(sorted(req.extras))}]"
        text += f" @ {req.url}" if req.url else str(req.specifier)
        out.add(text)
    return tuple(sorted(out))


def _applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in sorted(extras | {""}))


def layer_spec(
    requires: tuple[str, ...],
    extras: list[str],
    *,
    torch: str | None,
    index_url: str | None,
    wheelhouse: Path | None,
    installer: str,
) -> LayerSpec:
    source = (
        f"index={index_url or 'default'};wheelhouse={wheelhouse.resolve() if wheelhouse else ''}"
    )
    return LayerSpec(
        requirements=resolved_requirements(requires, extras),
        torch=torch,
        python=python_id(),
        source=source,
        installer=installer,
    )


# ---------------------------------------------------------------------------- the requirement check


def visible_versions(paths: list[str]) -> dict[str, tuple[str, Path]]:
    """name -> (version, dist-info dir) of the distribution Python would find first on ``paths``."""
    found: dict[str, tuple[str, Path]] = {}
    for entry in paths:
        try:
            names = os.listdir(entry) if entry else []
        except OSError:
            continue
        for name in names:
            match = _DIST_DIR.match(name)
            if match is None:
                continue
            key = canonicalize_name(match["name"])
            found.setdefault(key, (match["version"], Path(entry) / name))
    return found


def _requires_of(info_dir: Path) -> list[str]:
    meta = info_dir / "METADATA"
    if not meta.is_file():
        meta = info_dir / "PKG-INFO"
    try:
        text = meta.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    head = text.split("\n\n", 1)[0]
    return [
        ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.startswith("Requires-Dist:")
    ]


def unmet(
    requirements: list[tuple[str, list[str], set[str]]], visible: dict[str, tuple[str, Path]]
) -> list[str]:
    """What ``pip check`` would say: (owner, Requires-Dist lines, extras) against ``visible``."""
    problems: list[str] = []
    for owner, lines, extras in requirements:
        for line in lines:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            name = canonicalize_name(req.name)
            if name == FRONTEND or not _applies(req, extras):
                continue
            have = visible.get(name)
            if have is None:
                problems.append(f"{owner} requires {req.name}, which is not installed")
            elif not _satisfies(req.specifier, have[0]):
                problems.append(
                    f"{owner} requires {req.name}{req.specifier}, but {have[0]} is installed"
                )
    return problems


def _satisfies(spec: SpecifierSet, version: str) -> bool:
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True  # a legacy version string: nothing reliable to compare


def env_paths(python: Path, box: jail.Box | None = None) -> list[str]:
    """``sys.path`` of ``python``'s environment. Its ``.pth`` files run: an environment holding a
    candidate (or what its requirements pulled in) is asked in the job's ``box``."""
    cmd = [str(python), "-c", "import sys; print('\\n'.join(sys.path))"]
    env = allowlist.candidate_environ("install", home=Path(box.cwd or "/") if box else Path("/"))
    out = sandbox.capture(cmd, env=env, box=box, timeout_s=120)
    if out.returncode != 0:
        raise LayerError(f"{python} could not list its path: {out.stderr.strip()[-300:]}")
    return [p for p in out.stdout.splitlines() if p]


def left_to_host(site: Path, host_sites: list[Path]) -> list[str]:
    """What the distributions in ``site`` require and ``site`` does not hold, each with what
    ``host_sites`` (the host torch's) offer for it: ``nvidia-cublas (host: 13.1.0.3)`` or
    ``nvidia-cublas (not on this host)``, or the conflict as ``unmet`` words it."""
    own = visible_versions([str(site)])
    beside = visible_versions([str(p) for p in host_sites])
    out: list[str] = []
    for name, (version, info) in sorted(own.items()):
        for line in _requires_of(info):
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            dep = canonicalize_name(req.name)
            if dep in own or not _applies(req, set()):
                continue
            have = beside.get(dep)
            if have is None:
                out.append(f"{req.name} (not on this host)")
            elif _satisfies(req.specifier, have[0]):
                out.append(f"{req.name} (host: {have[0]})")
            else:
                out.append(f"{name} {version} requires {req.name}{req.specifier}, host: {have[0]}")
    return out


def check_env(
    python: Path,
    owners: list[tuple[str, list[str], set[str]]],
    also: list[str],
    box: jail.Box | None = None,
) -> list[str]:
    """Unmet requirements in the environment of ``python``.

    ``owners`` are (name, Requires-Dist lines, extras) checked as given; ``also`` names visible
    distributions (the layer's, torch) whose own requirements must hold too.
    """
    visible = visible_versions(env_paths(python, box))
    checks = list(owners)
    for name in also:
        have = visible.get(canonicalize_name(name))
        if have is not None:
            checks.append((f"{name} {have[0]}", _requires_of(have[1]), set()))
    return unmet(checks, visible)


# ---------------------------------------------------------------------------- the layer on disk


def frontend_in(site: Path) -> list[str]:
    """What of the frontend a directory holds: its metadata or its ``cudnn`` package."""
    found = [
        n
        for n in (os.listdir(site) if site.is_dir() else [])
        if (m := _DIST_DIR.match(n)) and canonicalize_name(m["name"]) == FRONTEND
    ]
    if (site / "cudnn").exists():
        found.append("cudnn/")
    return found


def layer_dists(site: Path) -> list[str]:
    return sorted(visible_versions([str(site)]))


@contextlib.contextmanager
def locked(path: Path, timeout_s: float) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LayerError(f"another runner held {path} for {timeout_s:.0f} s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_only(root: Path) -> None:
    """Strip write bits: a job only ever reads a layer."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                os.chmod(path, mode & ~0o222)
    os.chmod(root, stat.S_IMODE(root.stat().st_mode) & ~0o222)


def remove(root: Path) -> None:
    """Remove a layer (or a half-built one), restoring write bits first."""
    if not root.exists():
        return
    for dirpath, dirnames, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    shutil.rmtree(root, ignore_errors=True)


def usable(root: Path, spec: LayerSpec) -> Layer | None:
    """The layer at ``root`` if complete and clean; one holding the frontend is refused."""
    marker = root / "layer.json"
    if not marker.is_file():
        return None
    layer = Layer(root=root, spec=spec, built_s=None)
    bad = frontend_in(layer.site_packages)
    if bad:
        raise LayerError(f"layer {spec.key} contains the frontend ({', '.join(bad)}): refused")
    return layer


def attach(env_site: Path, layer: Layer) -> None:
    """Make a job's venv see the layer (with the layer's own ``.pth`` files processed)."""
    jail.make_reachable(layer.site_packages)
    (env_site / LAYER_PTH).write_text(
        f"import site; site.addsitedir({str(layer.site_packages)!r})\n"
    )
