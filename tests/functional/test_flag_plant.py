"""The #837 plant (``testkit/flag_plant.py``) on the registry's real 1.32.0 wheel, CPU only: it
differs from the original only in the dense backward's flag line (and RECORD), passes the
service's wheel checks, installs, and what the probe's ``torch_flag`` method sees of it. The
determinism run that catches it needs a GPU (docs/determinism.md gives the command)."""

from __future__ import annotations

import ast
import difflib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from service.uploads.wheelcheck import check_wheel
from testkit.flag_plant import (
    FLAG,
    KNOB,
    PROVIDER,
    TORCH_OP,
    drop_dense_flag,
    drop_provider_flag,
    plant_dropped_flag,
    plant_dropped_provider_flag,
)
from testkit.registry import registry_wheel
from testkit.service import ROOT

INFO = "nvidia_cudnn_frontend-1.32.0.dist-info/RECORD"

_PROBE = """
import json
from core.subjects import SUBJECTS
from runner.inside import probe
r = probe.probe_subject(SUBJECTS["sdpa_torch_bwd"])
print(json.dumps({"cap": r["capability"], "check": r["check"]}))
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    original = registry_wheel("1.32.0")
    return original, plant_dropped_flag(original, tmp_path_factory.mktemp("planted"))


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}


def test_the_plant_drops_one_line_of_the_dense_backward_and_nothing_else(wheels) -> None:  # type: ignore[no-untyped-def]
    original, planted = (_members(w) for w in wheels)
    assert set(original) == set(planted)
    changed = sorted(n for n in original if original[n] != planted[n])
    assert changed == [TORCH_OP, INFO]
    before, after = (m[TORCH_OP].decode().splitlines() for m in (original, planted))
    diff = [d for d in difflib.unified_diff(before, after, lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("---", "+++"))]  # fmt: skip
    assert diff == [f"-            {KNOB}={FLAG},"]
    flag_line = f"{KNOB}={FLAG},"
    assert [ln.strip() for ln in before].count(flag_line) == 2  # dense and packed THD
    assert [ln.strip() for ln in after].count(flag_line) == 1  # the THD call still reads it
    # the line was the dense call's: what remains sits beside the THD call's cu_seqlens
    rest = next(i for i, ln in enumerate(after) if ln.strip() == flag_line)
    assert any("cu_seqlens_q=cu_q" in ln for ln in after[rest - 6 : rest])


def test_the_planted_wheel_passes_the_uploads_checks_and_installs(wheels, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _original, planted = wheels
    # RECORD hashes and sizes match every member, as the upload door checks them
    assert check_wheel(planted, planted.name, Version("1.32.0"), 1 << 31) == (
        "nvidia-cudnn-frontend", "1.32.0")  # fmt: skip
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--target", str(target), str(planted)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    installed = (target / TORCH_OP).read_bytes()
    assert installed == _members(planted)[TORCH_OP]
    assert f"{KNOB}={FLAG}".encode() in installed


def test_the_probe_still_finds_the_flag_so_only_a_gpu_run_catches_the_drop(
    wheels,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The probe's ``torch_flag`` method reads whether the backward's source reads the flag at
    all; the planted backward still does on its THD path, so the knob reads present on both
    builds. Catching the dense path's drop needs sdpa_torch_bwd's deterministic arm on a GPU."""
    seen: dict[str, Any] = {}
    for label, wheel in zip(("original", "planted"), wheels, strict=True):
        unpacked = tmp_path / label
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(unpacked)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = os.pathsep.join([str(unpacked), str(ROOT)])
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        seen[label] = json.loads(done.stdout.strip().splitlines()[-1])
    for label in seen:
        assert seen[label]["cap"]["present"] is True, (label, seen[label])
        assert seen[label]["cap"]["method"] == "torch_flag"
    assert seen["original"]["cap"] == seen["planted"]["cap"]


def test_a_release_without_the_line_is_refused_not_planted_with_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dense calls pass"):
        drop_dense_flag(b"def _sdpa_backward(ctx):\n    return torch.ops.cudnn.sdpa_bwd(x)\n")
    with pytest.raises(ValueError, match="no single"):
        drop_dense_flag(b"x = 1\n")
    with pytest.raises(ValueError, match="has no"):
        plant_dropped_flag(registry_wheel("1.28.0"), tmp_path)  # its op is elsewhere
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_the_provider_plant_drops_the_sdpa_backwards_line_and_leaves_varlen_alone(
    tmp_path: Path,
) -> None:
    """#837's bug in ``cudnn.torch``'s provider: ``_bwd`` (PyTorch's SDPA backward, served by the
    frontend) loses its flag line; ``_varlen_bwd`` keeps its own, so the probe still reads the
    flag and only ``sdpa_provider_bwd`` on a GPU catches it. Before 1.29.0 there is nothing to
    plant into."""
    original = registry_wheel("1.32.0")
    planted = plant_dropped_provider_flag(original, tmp_path / "planted")
    before, after = (_members(w) for w in (original, planted))
    assert sorted(n for n in before if before[n] != after[n]) == [PROVIDER, INFO]
    old, new = (m[PROVIDER].decode().splitlines() for m in (before, after))
    diff = [d for d in difflib.unified_diff(old, new, lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("---", "+++"))]  # fmt: skip
    assert diff == [f"-        {KNOB}={FLAG},"]
    tree = ast.parse(after[PROVIDER])
    reads = {f.name: f"{KNOB}={FLAG}" in ast.unparse(f) for f in tree.body
             if isinstance(f, ast.FunctionDef) and f.name in ("_bwd", "_varlen_bwd")}  # fmt: skip
    assert reads == {"_bwd": False, "_varlen_bwd": True}
    assert check_wheel(planted, planted.name, Version("1.32.0"), 1 << 31) == (
        "nvidia-cudnn-frontend", "1.32.0")  # fmt: skip
    with pytest.raises(ValueError, match="has no"):
        plant_dropped_provider_flag(registry_wheel("1.28.0"), tmp_path / "old")
    assert not (tmp_path / "old").exists() or list((tmp_path / "old").iterdir()) == []
    with pytest.raises(ValueError, match="calls pass"):
        drop_provider_flag(b"def _bwd(x):\n    return torch.ops.cudnn.sdpa_bwd(x)\n")
