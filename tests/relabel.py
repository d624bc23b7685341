"""Relabel a real wheel to claim another version: the version string lies, the code does not.

The result is a real wheel, installable by pip: the METADATA ``Version``, the ``.dist-info``
directory, the file name, every RECORD hash and size, and the package's own ``__version__``
assignments in its Python files all say the new version; the code is the original's.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

from packaging.version import Version

from runner import envs
from tests.wheels import CACHE, registry_wheel

_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl$")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def _relabel_version_line(data: bytes, old: str, new: str) -> bytes:
    pattern = re.compile(rb"""^(__version__\s*=\s*)(["'])""" + re.escape(old.encode()) + rb"\2",
                         re.MULTILINE)  # fmt: skip
    return pattern.sub(lambda m: m.group(1) + m.group(2) + new.encode() + m.group(2), data)


def relabel_wheel(src: Path, version: str, dest_dir: Path) -> Path:
    """A copy of wheel ``src`` in ``dest_dir`` that claims ``version``."""
    new = str(Version(version))  # normalised, as installers write it
    match = _WHEEL_NAME.match(src.name)
    if match is None:
        raise ValueError(f"{src.name}: not a wheel file name")
    dist, old = match["name"], match["version"]
    old_info, new_info = f"{dist}-{old}.dist-info/", f"{dist}-{new}.dist-info/"
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{dist}-{new}-{match['tags']}.whl"
    record_name = f"{new_info}RECORD"
    records: list[str] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            name = info.filename
            if name.startswith(old_info):
                name = new_info + name[len(old_info) :]
            if name == record_name:
                continue
            out = zipfile.ZipInfo(name, date_time=info.date_time)
            out.external_attr = info.external_attr
            if info.is_dir():
                zout.writestr(out, b"")
                continue
            data = zin.read(info)
            if name == f"{new_info}METADATA":
                data = re.sub(rb"(?m)^Version: .*$", b"Version: " + new.encode(), data, count=1)
            elif name.endswith(".py") and "/" in name and not name.startswith(new_info):
                data = _relabel_version_line(data, old, new)
            out.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(out, data)
            records.append(f"{name},{_record_hash(data)},{len(data)}")
        records.append(f"{record_name},,")
        rec = zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0))
        rec.external_attr = 0o644 << 16
        zout.writestr(rec, "\n".join(records) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    return dest


def relabelled_env(real: str, claim: str) -> envs.CandidateEnv:
    """A cached environment with release ``real`` installed under the version ``claim``."""
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    root = CACHE / "envs" / f"frontend-{real}-as-{claim}-{py}"
    marker = root / ".fe-ci-ready"
    if marker.exists():
        return envs.CandidateEnv(root)
    wheel = relabel_wheel(registry_wheel(real), claim, CACHE / "relabelled" / f"{real}-as-{claim}")
    env = envs.create_env(root)
    outcome = envs.install_candidate(env, wheel, log_path=root / "install.log", timeout_s=900)
    assert outcome.ok, outcome.log_tail
    marker.write_text("ok\n")
    return env
