"""The probe on real releases, in real candidate environments, as a real subprocess.

Each probe runs ``python -m runner.inside.probe`` with the candidate environment's own Python and
only the runner's source on PYTHONPATH, exactly as the runner starts it. The relabelled builds are
real registry wheels rewritten to claim another version (testkit/registry.py) and installed by pip.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from core import regression
from core.wire import Capability, Severity, Stage, StageResult, Status
from runner.inside import documents, introspect
from runner.pipeline import ledger
from testkit.registry import candidate_env, registry_wheel, relabel_wheel, relabelled_env

ROOT = Path(__file__).resolve().parents[2]
slow = pytest.mark.slow  # installs and probes real registry releases


def run_probe(
    python: Path,
    out_dir: Path,
    extra_path: Path | None = None,
    status: str = "pass",
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    out = out_dir / f"probe-{len(list(out_dir.glob('probe-*')))}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([*([str(extra_path)] if extra_path else []), str(ROOT)])
    given: list[str] = []
    if params is not None:
        (out_dir / f"{out.stem}.in.json").write_text(json.dumps(params))
        given = ["--in", str(out_dir / f"{out.stem}.in.json")]
    proc = subprocess.run(
        [str(python), "-m", "runner.inside.probe", *given, "--out", str(out)],
        env=env,
        cwd=out_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["status"] == status, doc
    StageResult.model_validate({"name": Stage.probe, **doc})  # the shape the runner reads
    assert documents.problems("probe", doc) == []
    return doc


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("probes")
    return {
        "1.32.0": run_probe(candidate_env("1.32.0").python, out),
        "1.28.0": run_probe(candidate_env("1.28.0").python, out),
        "1.27.0": run_probe(candidate_env("1.27.0").python, out),
        "1.27.0-as-1.28.0": run_probe(relabelled_env("1.27.0", "1.28.0").python, out),
        "1.28.0-as-1.27.0": run_probe(relabelled_env("1.28.0", "1.27.0").python, out),
    }


def caps(doc: dict[str, Any]) -> dict[str, Capability]:
    return {k: Capability.model_validate(v) for k, v in doc["capabilities"].items()}


def check(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [c for c in doc["checks"] if c["name"] == name]
    return found


def kinds(findings: list[Any], subject: str | None = None) -> set[str]:
    return {
        (f["kind"] if isinstance(f, dict) else f.kind)
        for f in findings
        if subject is None or (f["subject"] if isinstance(f, dict) else f.subject) == subject
    }


@slow
def test_a_probe_whose_build_has_a_cpu_job_leaves_the_surface_to_it(
    probes: dict, tmp_path: Path
) -> None:
    """A GPU job's lease says ``probe_surface: false`` where the build's CPU job reads the
    surface: its probe finds the same entry points and capabilities, reads no source, and says
    so; the CPU job's probe (the module's) read 1.32.0's knobs."""
    read = probes["1.32.0"]
    left = run_probe(candidate_env("1.32.0").python, tmp_path, params={"surface": False})
    assert read["surface"] and read["surface_read"]["files"] > 1000
    assert left["surface"] == [] and left["surface_read"]["files"] == 0
    assert "the surface is not read here: the build's cpu job reads" in left["reason"]
    assert left["capabilities"] == read["capabilities"] and left["features"] == read["features"]
    assert "knob_not_covered" in kinds(read["findings"])  # 1.32.0 has knobs no subject runs
    assert not kinds(left["findings"]) & {"knob_not_covered", "source_unparsable"}


@slow
def test_1_32_dsrelu_knob_follows_torch_flag_read_from_signature(probes: dict) -> None:
    doc = probes["1.32.0"]
    cap = caps(doc)["grouped_gemm_dsrelu"]
    assert (cap.importable, cap.present, cap.default, cap.method) == (
        True,
        True,
        "None",
        "signature",
    )
    assert check(doc, "grouped_gemm_dsrelu.deterministic")["status"] == "pass"
    assert "default_ignores_torch_flag" not in kinds(doc["findings"], "grouped_gemm_dsrelu")
    assert doc["version"] == doc["module_version"] == "1.32.0"


@slow
def test_1_32_dglu_default_false_is_reported(probes: dict) -> None:
    doc = probes["1.32.0"]
    cap = caps(doc)["grouped_gemm_dglu"]
    assert (cap.present, cap.default, cap.method) == (True, "False", "signature")
    (finding,) = [f for f in doc["findings"] if f["subject"] == "grouped_gemm_dglu"]
    assert (finding["kind"], finding["severity"]) == ("default_ignores_torch_flag", "info")
    assert "torch.use_deterministic_algorithms" in finding["message"]


@slow
def test_1_32_sdpa_knob_is_read_from_the_pybind_docstring(probes: dict) -> None:
    doc = probes["1.32.0"]
    cap = caps(doc)["sdpa_bwd"]
    assert (cap.present, cap.default, cap.method) == (True, "False", "docstring")
    assert cap.entry_point == "cudnn._compiled_module.backend_graph.sdpa_backward"
    assert check(doc, "sdpa_bwd.use_deterministic_algorithm")["status"] == "pass"


@slow
def test_1_32_flex_attention_and_every_feature_present(probes: dict) -> None:
    doc = probes["1.32.0"]
    cap = caps(doc)["flex_attention_bwd"]
    assert (cap.importable, cap.present, cap.default) == (True, True, "False")
    assert check(doc, "flex_attention_bwd.deterministic")["status"] == "pass"
    assert set(doc["features"]) == {f.id for f in ledger.load_ledger()}
    assert all(v is True for v in doc["features"].values()), doc["features"]


@slow
def test_1_32_environment_and_unread_backend(probes: dict) -> None:
    doc = probes["1.32.0"]
    env = doc["environment"]
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["cutlass_dsl"] and env["torch"]
    assert env["cudnn_backend"] is None  # no libcudnn on this host, and the probe says so
    assert any("cuDNN backend" in u for u in doc["unread"]), doc["unread"]


@slow
def test_1_27_has_neither_grouped_knob_nor_flex_attention(probes: dict) -> None:
    doc = probes["1.27.0"]
    got = caps(doc)
    for subject in ("grouped_gemm_dsrelu", "grouped_gemm_dglu"):
        assert got[subject].importable and not got[subject].present
        c = check(doc, f"{subject}.deterministic")
        assert c["status"] == "not_applicable" and "no 'deterministic' parameter" in c["detail"]
    flex = got["flex_attention_bwd"]
    assert not flex.importable and flex.error and "ModuleNotFoundError" in flex.error
    c = check(doc, "flex_attention_bwd.deterministic")
    assert c["status"] == "not_applicable" and "cudnn.flex_attention not importable" in c["detail"]
    # an entry point this release simply does not have is not an import error
    assert "import_error" not in kinds(doc["findings"])
    assert doc["features"]["grouped_gemm_dsrelu.deterministic"] is False
    assert doc["features"]["grouped_gemm_quant.optional_prob_tensor"] is True


@slow
def test_relabelled_1_27_claiming_1_28_is_a_version_feature_mismatch(probes: dict) -> None:
    doc = probes["1.27.0-as-1.28.0"]
    assert doc["version"] == doc["module_version"] == "1.28.0"  # the label took
    found = ledger.ledger_findings(doc["version"], doc["features"])
    (f,) = [f for f in found if f.subject == "grouped_gemm_dsrelu"]
    assert (f.kind, f.severity) == ("version_feature_mismatch", Severity.error)
    assert "reports 1.28.0" in f.message and "no 'deterministic' parameter" in f.message


@slow
def test_relabelled_1_28_claiming_1_27_has_a_feature_that_predates_it(probes: dict) -> None:
    doc = probes["1.28.0-as-1.27.0"]
    assert doc["version"] == doc["module_version"] == "1.27.0"
    found = ledger.ledger_findings(doc["version"], doc["features"])
    (f,) = [f for f in found if f.subject == "grouped_gemm_dsrelu"]
    assert (f.kind, f.severity) == ("feature_predates_version", Severity.warning)
    assert "already takes 'deterministic'" in f.message


@slow
@pytest.mark.parametrize("version", ["1.27.0", "1.28.0", "1.32.0"])
def test_unmodified_releases_match_the_ledger(probes: dict, version: str) -> None:
    doc = probes[version]
    assert doc["version"] == version
    assert ledger.ledger_findings(doc["version"], doc["features"]) == []


@slow
def test_missing_dependencies_are_import_errors_not_absence(tmp_path: Path, probes: dict) -> None:
    """1.32.0's own files without its dependencies (no torch, no CUDA python, no CUTLASS DSL)."""
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(registry_wheel("1.32.0")) as zf:
        zf.extractall(unpacked)
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    doc = run_probe(bare / "bin" / "python", tmp_path, extra_path=unpacked)
    got = caps(doc)
    for subject in ("grouped_gemm_dsrelu", "grouped_gemm_dglu", "flex_attention_bwd"):
        assert not got[subject].importable and got[subject].error
        (f,) = [f for f in doc["findings"] if f["subject"] == subject]
        assert (f["kind"], f["severity"]) == ("import_error", "warning")
        assert "is in this build but failed to import" in f["message"]
        assert check(doc, f"{subject}.{got[subject].knob}")["status"] == "not_applicable"
    assert got["sdpa_bwd"].present  # the compiled module needs none of them
    assert doc["features"]["grouped_gemm_dsrelu.deterministic"] is None
    assert ledger.ledger_findings(doc["version"], doc["features"]) == []
    assert any("grouped_gemm_dsrelu.deterministic" in u for u in doc["unread"])
    # the service turns these into errors when the previous build of the line imported them
    previous = caps(probes["1.32.0"])
    findings = StageResult.model_validate({"name": "probe", **doc}).findings
    upgraded = regression.upgrade_import_errors(findings, previous)
    assert {f.severity for f in upgraded if f.kind == "import_error"} == {Severity.error}


@slow
def test_real_releases_1_29_1_to_1_30_0_lost_the_dglu_knob(tmp_path: Path) -> None:
    """The 1.30.0 release dropped grouped_gemm_dglu's 'deterministic'; 1.31.0 brought it back."""
    before = run_probe(candidate_env("1.29.1").python, tmp_path)
    after = run_probe(candidate_env("1.30.0").python, tmp_path)
    assert ledger.ledger_findings(before["version"], before["features"]) == []
    (lost,) = regression.regressions(caps(before), caps(after))
    assert (lost.kind, lost.severity, lost.subject) == (
        "feature_regression",
        Severity.error,
        "grouped_gemm_dglu",
    )
    (gate,) = ledger.ledger_findings(after["version"], after["features"])
    assert (gate.kind, gate.subject) == ("version_feature_mismatch", "grouped_gemm_dglu")
    assert check(after, "grouped_gemm_dglu.deterministic")["status"] == Status.not_applicable


@slow
def test_relabel_rewrites_every_place_the_version_lives(tmp_path: Path) -> None:
    out = relabel_wheel(registry_wheel("1.27.0"), "1.28.0", tmp_path)
    assert out.name.startswith("nvidia_cudnn_frontend-1.28.0-")
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert not [n for n in names if "1.27.0.dist-info" in n]
        meta = zf.read("nvidia_cudnn_frontend-1.28.0.dist-info/METADATA").decode()
        assert "\nVersion: 1.28.0\n" in meta
        assert '__version__ = "1.28.0"' in zf.read("cudnn/__init__.py").decode()
        record = zf.read("nvidia_cudnn_frontend-1.28.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if not digest:
                continue
            data = zf.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={want}", len(data)), name
        assert len([ln for ln in record if ln]) == len([n for n in names if not n.endswith("/")])


# ------------------------------------------------------------ the docstring reader, on its own


def test_doc_parameters_reads_pybind_signature_lines() -> None:
    doc = (
        "f(self, q: m.tensor, mode: m.align = <align.TOP_LEFT: 0>, "
        "cb: Optional[Callable[[m.graph, m.tensor], m.tensor]] = None, "
        "name: str = 'a, b', flag: bool = False) -> list[m.tensor]\n\nLonger text."
    )
    params = introspect.doc_parameters(doc, "f")
    assert params == {
        "q": None,
        "mode": "<align.TOP_LEFT: 0>",
        "cb": "None",
        "name": "'a, b'",
        "flag": "False",
    }


def test_doc_parameters_merges_overloads_and_refuses_prose() -> None:
    doc = (
        "g(*args, **kwargs)\nOverloaded function.\n\n"
        "1. g(self, a: int) -> None\n\n2. g(self, b: int = 3) -> None\n"
    )
    assert introspect.doc_parameters(doc, "g") == {
        "args": None,
        "kwargs": None,
        "a": None,
        "b": "3",
    }
    assert introspect.doc_parameters("Compute the gradients.", "g") is None
    assert introspect.doc_parameters(None, "g") is None


def test_an_environment_without_torch_is_an_error_not_a_pass(tmp_path: Path) -> None:
    """A venv that cannot see torch (the environment's fault, not the build's): the probe says so
    instead of reporting every torch-importing subject as a missing feature."""
    venv = tmp_path / "no-torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    out = tmp_path / "probe.json"
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"expect_torch": True}))  # as the runner asks of its own envs
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = [str(venv / "bin" / "python"), "-m", "runner.inside.probe", "--in", str(params)]
    proc = subprocess.run(
        [*probe, "--out", str(out)],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["status"] == "error" and "torch does not import" in doc["reason"], doc
    assert "No module named 'torch'" in doc["reason"]
    StageResult.model_validate({"name": Stage.probe, **doc})
    # asked of a bare interpreter (--preinstalled), the probe reports what it can, torch aside;
    # with no cudnn there either, that fails: nothing a consumer could use
    doc = run_probe(venv / "bin" / "python", tmp_path, status="fail")
    assert any(u.startswith("torch: ModuleNotFoundError") for u in doc["unread"]), doc["unread"]
    (whole,) = [f for f in doc["findings"] if f["subject"] is None]
    assert (whole["kind"], whole["severity"]) == ("import_error", "error")
    assert "no cudnn package in this environment" in whole["message"]


def test_the_determinism_stage_reads_a_knob_as_the_probe_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An overloaded pybind11 method names its parameters only in its numbered lines; the
    determinism stage's own look (without the probe's answer) must read those as the probe does."""
    from runner.inside.subjects.base import knob_present

    module = types.ModuleType("fe_ci_fake_pybind")

    def sdpa_backward(*args: Any, **kwargs: Any) -> None: ...

    sdpa_backward.__doc__ = (
        "sdpa_backward(*args, **kwargs)\nOverloaded function.\n\n"
        "1. sdpa_backward(self: graph, q: tensor, use_deterministic_algorithm: bool = False)"
        " -> None\n"
    )
    module.sdpa_backward = sdpa_backward  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fe_ci_fake_pybind", module)
    path = "fe_ci_fake_pybind.sdpa_backward"
    assert knob_present(path, "use_deterministic_algorithm", "docstring") == (True, "")
    params, method = introspect.read_parameters(sdpa_backward, "docstring")
    assert method == "docstring" and params and "use_deterministic_algorithm" in params
    assert knob_present(path, "deterministic", "docstring")[0] is False
