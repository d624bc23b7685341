"""The determinism surface of the registry's real releases, discovered the probe's way, against
the ledger bench/surface_ledger.py measured (core/surface_ledger.json); and the real probe over
doctored copies of 1.32.0: a knob dropped from one wrapper, a new knob on a new function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from core import surface
from testkit.registry import doctor_wheel, registry_wheel
from testkit.service import ROOT
from testkit.surface import discover_wheel, knob_set

pytestmark = pytest.mark.slow  # reads six real releases
LEDGER = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]
VERSIONS = ("1.28.0", "1.29.0", "1.29.1", "1.30.0", "1.31.0", "1.32.0")
DGLU = ("cudnn.grouped_gemm_dglu_wrapper_sm100", "deterministic")


def _probe(wheel: Path, tmp: Path) -> dict[str, Any]:
    """The real probe (``python -m runner.inside.probe``) over the wheel's own files."""
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(unpacked), str(ROOT)])
    out = tmp / "probe.json"
    proc = subprocess.run(
        [sys.executable, "-m", "runner.inside.probe", "--out", str(out)],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["surface_read"]["truncated"] == "", doc["surface_read"]  # read whole
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_each_release_has_the_surface_the_ledger_records(version: str) -> None:
    doc = discover_wheel(registry_wheel(version))
    assert doc["unparsed"] == [] and doc["truncated"] == ""
    assert knob_set(doc) == knob_set(LEDGER[version])


def test_the_ledger_tells_each_known_story() -> None:
    def changes(a: str, b: str) -> set[tuple[str, str]]:
        found = surface.changes(LEDGER[a]["knobs"], LEDGER[b]["knobs"])
        return {(f["kind"], f["message"].split(" ", 1)[0]) for f in found}

    # 1.30.0's dGLU gap: present in 1.29.1, gone in 1.30.0, back in 1.31.0
    dglu = "cudnn.grouped_gemm_dglu_wrapper_sm100(deterministic=False)"
    assert ("knob_removed", dglu) in changes("1.29.1", "1.30.0")
    assert ("knob_added", dglu) in changes("1.30.0", "1.31.0")
    # 1.28 -> 1.29: the cudnn.experimental.ops op and the SdpabwdSm80 class went away
    lost = {name for kind, name in changes("1.28.0", "1.29.0") if kind == "knob_removed"}
    assert lost == {
        "cudnn.sdpa.bwd.SdpabwdSm80.execute(deterministic=False)",
        "torch.ops.cudnn.sdpa_bwd",  # the message goes on: [cudnn.experimental.ops.sdpa](...)
    }
    # 1.32.0's torch-flag followers: the sdpa torch op's backward and the dSReLU wrapper
    flag = {k["entry_point"] for k in LEDGER["1.32.0"]["knobs"] if k["kind"] == "torch_flag"}
    assert {
        "cudnn.sdpa.fwd.torch_op._sdpa_backward",
        "cudnn.grouped_gemm_dsrelu_wrapper_sm100",
        "cudnn.ops.causal_conv1d._run_causal_conv1d_bulk_backend",
    } <= flag
    ops = {k["entry_point"] for k in LEDGER["1.32.0"]["knobs"] if k["kind"] == "op_schema"}
    assert "torch.ops.cudnn.sdpa_bwd [cudnn.sdpa.fwd.torch_op]" in ops
    assert "torch.ops.cudnn.sdpa_bwd [cudnn.experimental.ops.sdpa]" in knob_names("1.28.0")


def knob_names(version: str) -> set[str]:
    return {k["entry_point"] for k in LEDGER[version]["knobs"]}


def test_a_knob_dropped_from_one_wrapper_is_knob_removed(tmp_path: Path) -> None:
    member = "cudnn/gemm/cutedsl/grouped/dglu/api.py"

    def drop(data: bytes) -> bytes:
        text = data.decode()
        head, sep, tail = text.partition("def grouped_gemm_dglu_wrapper_sm100(")
        sig, close, rest = tail.partition(") ->")
        lines = [ln for ln in sig.split("\n") if not ln.strip().startswith("deterministic")]
        return (head + sep + "\n".join(lines) + close + rest).encode()

    wheel = doctor_wheel(registry_wheel("1.32.0"), tmp_path / "w", {member: drop})
    doc = _probe(wheel, tmp_path)
    now = {(k["entry_point"], k["knob"]) for k in doc["surface"]}
    assert DGLU not in now
    found = surface.changes(LEDGER["1.32.0"]["knobs"], doc["surface"])
    assert [(f["kind"], f["severity"]) for f in found] == [("knob_removed", "error")]
    assert "grouped_gemm_dglu_wrapper_sm100(deterministic=False) is gone" in found[0]["message"]


def test_a_new_knob_on_a_new_function_is_knob_not_covered(tmp_path: Path) -> None:
    def add(data: bytes) -> bytes:
        return data + (
            b"\n\ndef fresh_backward_wrapper(x, deterministic: bool = False):\n"
            b"    return x\n\n__all__ = [*globals().get('__all__', []), 'fresh_backward_wrapper']\n"
        )

    wheel = doctor_wheel(registry_wheel("1.32.0"), tmp_path / "w", {"cudnn/__init__.py": add})
    doc = _probe(wheel, tmp_path)
    fresh = [f for f in doc["findings"] if "fresh_backward_wrapper" in f["message"]]
    assert [(f["kind"], f["severity"]) for f in fresh] == [("knob_not_covered", "warning")]
    added = surface.changes(LEDGER["1.32.0"]["knobs"], doc["surface"])
    assert [(f["kind"], f["message"]) for f in added] == [
        ("knob_added", "cudnn.fresh_backward_wrapper(deterministic=False) is new in this build")
    ]
    # every subject's knob is covered: those findings name no subject's entry point
    covered = {"grouped_gemm_dsrelu_wrapper_sm100", "flex_attn_func", "sdpa_backward("}
    assert not any(
        any(c in f["message"] for c in covered)
        for f in doc["findings"]
        if f["kind"] == "knob_not_covered"
    )
