"""Real frontend wheels from the package registry and environments with them installed the
runner's way, cached under ``FE_CI_TEST_CACHE`` (default ``~/.cache/fe-ci-tests``) so repeated
runs neither download nor install again.

Test processes run side by side (pytest-xdist workers, benchmarks): each cache entry is made
under an exclusive file lock and marked ready last, so a second process waits for the first and
then reuses what it made instead of racing it. ``relabel_wheel`` makes a real wheel claim another
version: the version string lies, the code does not.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.version import Version

from runner.envs import envs
from runner.isolation import jobbox
from testkit.wheels import record_line

CACHE = Path(os.environ.get("FE_CI_TEST_CACHE", Path.home() / ".cache" / "fe-ci-tests"))
PY = f"py{sys.version_info[0]}{sys.version_info[1]}"
READY = ".fe-ci-ready"
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl$")


@contextmanager
def _locked(entry: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``entry`` (a cache path) across processes."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f".{entry.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def registry_wheel(version: str, name: str = "nvidia-cudnn-frontend") -> Path:
    """The registry's wheel of ``name==version`` for this interpreter, downloaded once."""
    dest = CACHE / "wheels" / f"{name}-{version}"
    found = sorted(dest.glob("*.whl"))
    if found:
        return found[0]
    with _locked(dest):
        found = sorted(dest.glob("*.whl"))
        if not found:
            part = dest.with_name(dest.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                 "--only-binary=:all:", f"{name}=={version}", "-d", str(part)],
                check=True,
            )  # fmt: skip
            shutil.rmtree(dest, ignore_errors=True)
            part.rename(dest)
            found = sorted(dest.glob("*.whl"))
    return found[0]


def _installed_env(root: Path, wheel_of: Callable[[], Path]) -> envs.CandidateEnv:
    """The environment at ``root``, made once: a fresh venv with the wheel ``wheel_of()`` gives
    installed by the runner's installer."""
    if (root / READY).exists():
        with _locked(root):
            envs.repoint_host_torch(envs.CandidateEnv(root))
        return envs.CandidateEnv(root)
    with _locked(root):
        if not (root / READY).exists():
            shutil.rmtree(root, ignore_errors=True)  # a half-made one from a killed run
            env = envs.create_env(root)
            with jobbox.temporary(root.with_name(f".job-{root.name}")) as job:
                outcome = envs.install_candidate(
                    env, wheel_of(), job=job, log_path=root / "install.log", timeout_s=900
                )
            shutil.rmtree(job.work, ignore_errors=True)
            assert outcome.ok, outcome.log_tail
            (root / READY).write_text("ok\n")
    return envs.CandidateEnv(root)


def candidate_env(version: str) -> envs.CandidateEnv:
    """A cached environment with the registry's ``version`` installed the runner's way."""
    root = CACHE / "envs" / f"frontend-{version}-{PY}"
    return _installed_env(root, lambda: registry_wheel(version))


def relabelled_env(real: str, claim: str) -> envs.CandidateEnv:
    """A cached environment with release ``real`` installed under the version ``claim``."""
    dest = CACHE / "relabelled" / f"{real}-as-{claim}-{PY}"
    return _installed_env(
        CACHE / "envs" / f"frontend-{real}-as-{claim}-{PY}",
        lambda: relabel_wheel(registry_wheel(real), claim, dest),
    )


def _relabel_version_line(data: bytes, old: str, new: str) -> bytes:
    pattern = re.compile(rb"""^(__version__\s*=\s*)(["'])""" + re.escape(old.encode()) + rb"\2",
                         re.MULTILINE)  # fmt: skip
    return pattern.sub(lambda m: m.group(1) + m.group(2) + new.encode() + m.group(2), data)


def relabel_wheel(src: Path, version: str, dest_dir: Path) -> Path:
    """A copy of wheel ``src`` in ``dest_dir`` that claims ``version``: the METADATA
    ``Version``, the ``.dist-info`` directory, the file name, every RECORD hash and size, and the
    package's own ``__version__`` assignments all say the new version; the code is the original's.
    """
    new = str(Version(version))  # normalised, as installers write it
    match = _WHEEL_NAME.match(src.name)
    if match is None:
        raise ValueError(f"{src.name}: not a wheel file name")
    dist, old = match["name"], match["version"]
    old_info, new_info = f"{dist}-{old}.dist-info/", f"{dist}-{new}.dist-info/"

    def change(name: str, data: bytes) -> tuple[str, bytes]:
        if name.startswith(old_info):
            name = new_info + name[len(old_info) :]
        if name == f"{new_info}METADATA":
            data = re.sub(rb"(?m)^Version: .*$", b"Version: " + new.encode(), data, count=1)
        elif name.endswith(".py") and "/" in name and not name.startswith(new_info):
            data = _relabel_version_line(data, old, new)
        return name, data

    dest_dir.mkdir(parents=True, exist_ok=True)
    return _rewrite(src, dest_dir / f"{dist}-{new}-{match['tags']}.whl", new_info, change)


def doctor_wheel(src: Path, dest_dir: Path, edits: dict[str, Callable[[bytes], bytes]]) -> Path:
    """A copy of wheel ``src`` in ``dest_dir`` (same file name) with ``edits`` applied: ``{member:
    change(bytes) -> bytes}``, RECORD rewritten to match. Every named member must exist and
    change: an edit that no longer applies to a release says so instead of planting nothing."""
    match = _WHEEL_NAME.match(src.name)
    if match is None:
        raise ValueError(f"{src.name}: not a wheel file name")
    info = f"{match['name']}-{match['version']}.dist-info/"
    done: set[str] = set()

    def change(name: str, data: bytes) -> tuple[str, bytes]:
        if name in edits:
            new = edits[name](data)
            if new == data:
                raise ValueError(f"{src.name}: the edit of {name} changed nothing")
            done.add(name)
            return name, new
        return name, data

    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = _rewrite(src, dest_dir / src.name, info, change)
    if missing := set(edits) - done:
        dest.unlink()
        raise ValueError(f"{src.name} has no {sorted(missing)}")
    return dest


def _rewrite(
    src: Path, dest: Path, info: str, change: Callable[[str, bytes], tuple[str, bytes]]
) -> Path:
    """Copy wheel ``src`` to ``dest`` member by member through ``change(name, data)``, with a
    RECORD (under ``info``, the new ``.dist-info/``) that hashes what was written. Written
    beside ``dest`` and renamed into place: a ``change`` that raises leaves nothing."""
    part = dest.with_name(f".{dest.name}.part")
    try:
        _write(src, part, info, change)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(dest)
    return dest


def _write(
    src: Path, dest: Path, info: str, change: Callable[[str, bytes], tuple[str, bytes]]
) -> None:
    record_name = f"{info}RECORD"
    records: list[str] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if item.is_dir():
                out = zipfile.ZipInfo(change(item.filename, b"")[0], date_time=item.date_time)
                out.external_attr = item.external_attr
                zout.writestr(out, b"")
                continue
            name, data = change(item.filename, zin.read(item))
            if name == record_name:
                continue
            out = zipfile.ZipInfo(name, date_time=item.date_time)
            out.external_attr = item.external_attr
            out.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(out, data)
            records.append(record_line(name, data))
        records.append(f"{record_name},,")
        rec = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        rec.external_attr = 0o644 << 16
        zout.writestr(rec, "\n".join(records) + "\n", compress_type=zipfile.ZIP_DEFLATED)
