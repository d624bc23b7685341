"""The torch-flag subjects and the frontend refusal rows on the registry's real 1.28.0, 1.29.0
and 1.32.0 wheels, CPU only: the probe reads each subject's knob from the build's source, the
version ledger agrees with what it read (1.28.0's cudnn.experimental.ops op, whose backward never
reads the flag, is no finding; the same code claiming 1.29.0 is), the real sdpa_torch_bwd workload
failing on CPU tensors leaves the torch flag as it was, and each refusal row's release (the
wrapper's presence, read by discovery) is the one its declaration says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from core.frontend_refusals import FRONTEND_REFUSALS, REUSED_CHECK
from runner.pipeline.ledger import ledger_findings
from testkit.registry import registry_wheel
from testkit.service import ROOT
from testkit.surface import discover_wheel, knob_set

VERSIONS = ("1.28.0", "1.29.0", "1.32.0")
NEW = ("sdpa_torch_bwd", "sdpa_torch_thd_bwd", "causal_conv1d_bwd", "sdpa_provider_bwd")

_SCRIPT = """
import json, torch
from core.subjects import FEATURES, SUBJECTS
from runner.inside import frontend_refusal, probe
from runner.inside.torchflag import state
out = {"probe": {}, "features": {}, "runs": []}
for name in SUBJECT_NAMES:
    r = probe.probe_subject(SUBJECTS[name])
    out["probe"][name] = {"cap": r["capability"], "check": r["check"], "findings": r["findings"]}
for f in FEATURES:
    out["features"][f.id] = probe.detect_feature(f)[0]
out["rows"] = frontend_refusal.checks(None, None, None)
from runner.inside import refusal
out["frontend_only"] = refusal.run({"scope": "frontend", "family": "sm_90"})
if out["probe"]["sdpa_torch_bwd"]["cap"]["present"]:
    from runner.inside.subjects import sdpa_torch_bwd, sdpa_torch_thd_bwd
    for subject in (sdpa_torch_bwd.SUBJECT, sdpa_torch_thd_bwd.SUBJECT):  # dense, then packed THD
        work = subject.prepare(subject.configs[0], torch.device("cpu"))
        for start in ((False, False), (True, False), (True, True)):
            torch.use_deterministic_algorithms(start[0], warn_only=start[1])
            for knob in (False, True, True):
                try:
                    work.run(knob)
                    error = None
                except Exception as exc:
                    error = type(exc).__name__
                out["runs"].append({"start": list(start), "after": list(state()), "error": error})
out["provider"] = []
if out["probe"]["sdpa_provider_bwd"]["cap"]["present"]:
    from torch.nn.attention import SDPBackend
    from runner.inside.subjects import sdpa_provider_bwd
    work = sdpa_provider_bwd.SUBJECT.prepare(sdpa_provider_bwd.CONFIGS[0], torch.device("cpu"))
    # cuDNN attention alone (no CPU kernel), then PyTorch's math kernel: not the provider's
    for backends in ([SDPBackend.CUDNN_ATTENTION], [SDPBackend.MATH]):
        work.backends = backends
        for start in ((False, False), (True, False)):
            torch.use_deterministic_algorithms(start[0], warn_only=start[1])
            for knob in (False, True):
                try:
                    work.run(knob)
                    error = None
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                out["provider"].append({"start": list(start), "after": list(state()),
                                        "error": error})
    out["provider_modes"] = work.arms.modes
print(json.dumps(out))
""".replace("SUBJECT_NAMES", repr(NEW))


def _read(version: str, tmp: Path) -> dict[str, Any]:
    """The script above in a fresh interpreter, the wheel's own files first on its path."""
    unpacked = tmp / version
    with zipfile.ZipFile(registry_wheel(version)) as zf:
        zf.extractall(unpacked)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(unpacked), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, cwd=tmp, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return doc


@pytest.fixture(scope="module")
def read(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("torch-flag-wheels")
    return {v: _read(v, tmp) for v in VERSIONS}


def test_1_28_op_ignores_the_flag_so_the_knob_is_absent_and_the_ledger_agrees(read: dict) -> None:
    doc = read["1.28.0"]
    for name in ("sdpa_torch_bwd", "sdpa_torch_thd_bwd"):  # the op's two paths, one backward
        sdpa = doc["probe"][name]
        assert sdpa["cap"]["importable"] and not sdpa["cap"]["present"]
        assert sdpa["cap"]["entry_point"] == "cudnn.experimental.ops.sdpa._sdpa_backward"
        assert sdpa["check"]["status"] == "not_applicable"
        assert (
            "does not read torch.are_deterministic_algorithms_enabled()"
            in (sdpa["check"]["detail"])
        )
        assert doc["features"][f"{name}.torch_flag"] is False
    for name in ("causal_conv1d_bwd", "sdpa_provider_bwd"):  # no such module in 1.28.0
        cap = doc["probe"][name]["cap"]
        assert not cap["importable"] and doc["probe"][name]["check"]["status"] == "not_applicable"
    assert doc["provider"] == []
    features = doc["features"]
    assert features["sdpa_torch_bwd.torch_flag"] is False
    assert not [f for f in ledger_findings("1.28.0", features) if f.subject in NEW]
    # the same code claiming 1.29.0: a consumer's version gate would trust a flag it ignores
    lying = [f for f in ledger_findings("1.29.0", features) if f.subject == "sdpa_torch_bwd"]
    assert [f.kind for f in lying] == ["version_feature_mismatch"]


@pytest.mark.parametrize("version", ["1.29.0", "1.32.0"])
def test_from_1_29_both_backwards_read_the_flag(read: dict, version: str) -> None:
    doc = read[version]
    for name in NEW:
        cap = doc["probe"][name]["cap"]
        assert cap["present"] and cap["method"] == "torch_flag", (name, cap)
        assert cap["default"] == "torch.are_deterministic_algorithms_enabled()"
        assert doc["probe"][name]["check"]["status"] == "pass"
        assert not doc["probe"][name]["findings"]  # no default_ignores_torch_flag
        assert doc["features"][f"{name}.torch_flag"] is True
    assert not [f for f in ledger_findings(version, doc["features"]) if f.subject in NEW]


@pytest.mark.parametrize("version", ["1.29.0", "1.32.0"])
def test_a_failing_run_of_the_real_workload_leaves_the_flag_as_it_was(
    read: dict, version: str
) -> None:
    runs = read[version]["runs"]
    assert len(runs) == 18
    for run in runs:  # cudnn.sdpa_torch has no CPU kernel: every run raises, dense and THD
        assert run["error"] is not None
        assert run["after"] == run["start"], run


@pytest.mark.parametrize("version", ["1.29.0", "1.32.0"])
def test_the_provider_subject_never_counts_a_run_it_did_not_serve(read: dict, version: str) -> None:
    """The real workload on CPU tensors: with cuDNN attention alone PyTorch finds no kernel; with
    its math kernel allowed the run completes, but not on the provider, and raises rather than
    handing over another kernel's bytes. The flag is as it was after each run, and the
    deterministic arm ran warn-only."""
    runs = read[version]["provider"]
    assert len(runs) == 8
    for run in runs:
        assert run["after"] == run["start"], run
    assert all("No viable backend" in r["error"] for r in runs[:4]), runs[:4]
    for run in runs[4:]:
        assert run["error"].startswith("NotServed: cudnn.torch's provider did not serve"), run
    assert read[version]["provider_modes"] == ["off", "warn_only"] * 4


def test_refusal_rows_on_cpu_are_never_a_pass(read: dict) -> None:
    for version in VERSIONS:
        for check in read[version]["rows"]:
            assert check["status"] in ("skipped", "not_applicable"), (version, check)
    old = [c for c in read["1.28.0"]["rows"] if ".causal_conv1d_bwd." in f".{c['name']}"]
    assert [c["status"] for c in old] == ["not_applicable"] * 2  # its backward has no flag
    conv = [c for c in read["1.32.0"]["rows"] if ".causal_conv1d_bwd." in f".{c['name']}"]
    assert [c["status"] for c in conv] == ["skipped", "skipped"]
    assert all("no CUDA GPU" in c["detail"] for c in conv)


def test_a_frontend_only_refusal_stage_runs_the_frontend_rows_and_no_consumer_row(
    read: dict,
) -> None:
    """The lease's ``refusal_scope`` "frontend" (an sm_90 job reusing the CPU job's decisions):
    the real 1.32.0 build's rows, none of the consumer's 80, and the marker the service fills."""
    doc = read["1.32.0"]["frontend_only"]
    assert doc["refusal"] == [] and doc["findings"] == []
    names = [c["name"] for c in doc["checks"]]
    assert names == [*(r.check for r in FRONTEND_REFUSALS), REUSED_CHECK]
    dsa = [c for c in doc["checks"] if c["name"].startswith("frontend_refusal.dsa_")]
    assert [c["status"] for c in dsa] == ["skipped", "skipped"]  # no GPU here: never a pass
    assert all(c["detail"] for c in dsa)  # why, in words (here: no GPU, or no CuTe DSL)
    assert doc["status"] == "not_applicable" and "consumer's rows are reused" in doc["reason"]


def test_each_refusal_row_is_owed_from_the_release_its_declaration_says() -> None:
    surfaces = {v: knob_set(discover_wheel(registry_wheel(v))) for v in VERSIONS}
    for row in FRONTEND_REFUSALS:
        if row.knob == "torch flag":
            continue  # its entry point's presence is read by the probe above
        for version, knobs in surfaces.items():
            owed = Version(version) >= Version(row.since)
            assert ((row.entry_point, row.knob) in knobs) is owed, (row.name, version)
