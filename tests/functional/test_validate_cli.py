"""``fe-ci validate`` end to end on real registry wheels: progress, report, exit codes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from core import repro
from core.subjects import SUBJECTS
from core.wire import (
    BuildReport,
    BuildStatus,
    Check,
    JobKind,
    JobReport,
    JobState,
    Stage,
    StageResult,
    Status,
    Verdict,
)
from testkit import processes
from testkit.registry import candidate_env, registry_wheel
from testkit.service import ROOT, session_caches
from testkit.wheels import BROKEN, NO_LIBCUDNN, make_wheel

pytestmark = pytest.mark.slow  # a dozen real validate runs of registry wheels


def fe_ci(
    *args: str, cwd: Path, timeout: float = 900, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "FE_CI_RUNNER_LABELS": "",
            "FE_CI_CACHE_DIR": str(cwd / "cache"),
            **session_caches(),
        }
    )
    env.update(extra_env)
    return processes.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, text=True, timeout=timeout
    )


def test_validate_installs_probes_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = fe_ci(
        "validate",
        str(registry_wheel("1.32.0")),
        "--json",
        str(out),
        "--stages",
        "probe,refusal",
        cwd=tmp_path,
    )
    # incomplete: no GPU subject ran, and without --require that is the exit (the gate test
    # runs the same with --require)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # progress on stderr as the stages run, a readable report on stdout
    assert "install" in proc.stderr and "probe" in proc.stderr
    assert "verdict: incomplete" in proc.stdout and "excluded by --stages" in proc.stdout
    report = json.loads(out.read_text())
    assert report["version"] == "1.32.0" and report["verdict"] == "incomplete"
    stages = {s["name"]: s for s in report["jobs"][0]["stages"]}
    assert stages["install"]["status"] == "pass"
    assert stages["probe"]["status"] == "pass" and stages["refusal"]["status"] == "pass"
    assert stages["determinism"]["status"] == "skipped"
    assert stages["determinism"]["reason"] == "excluded by --stages"
    # what did not run says why, not "no sm_90 runner"
    assert {n["reason"] for n in report["not_run"] if n["status"] == "skipped"} == {
        "excluded by --stages"
    }
    caps = report["capabilities"]
    assert (
        caps["grouped_gemm_dsrelu"]["present"] is True
        and caps["grouped_gemm_dsrelu"]["default"] == "None"
    )
    assert caps["sdpa_bwd"]["method"] == "docstring"
    assert report["jobs"][0]["environment"]["torch"].startswith("2.13.0")


def test_a_relabelled_wheel_fails_on_the_ledger(tmp_path: Path) -> None:
    from testkit.registry import relabel_wheel

    liar = relabel_wheel(registry_wheel("1.27.0"), "1.28.0", tmp_path / "w")
    out = tmp_path / "r.json"
    proc = fe_ci("validate", str(liar), "--json", str(out), "--stages", "probe", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    kinds = {(f["kind"], f["severity"]) for f in report["findings"]}
    assert ("version_feature_mismatch", "error") in kinds
    assert report["verdict"] == "fail"


def test_a_wheel_whose_cudnn_does_not_import_fails(tmp_path: Path) -> None:
    """Was ``pass`` on a CPU-only host: every subject became not applicable, and "everything
    applicable ran and passed". Now the import error is a finding of severity error, the probe
    fails and nothing after it runs; a host without libcudnn (which releases before 1.15.0 load at
    import) makes it an error of the host instead: never a pass either way."""
    out = tmp_path / "broken.json"
    wheel = make_wheel(tmp_path / "w", "1.32.0", BROKEN)
    proc = fe_ci("validate", str(wheel), "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "verdict: fail" in proc.stdout
    report = json.loads(out.read_text())
    assert report["verdict"] == "fail"
    stages = {s["name"]: s for s in report["jobs"][0]["stages"]}
    assert stages["probe"]["status"] == "fail", stages["probe"]
    assert (
        stages["refusal"]["status"] == "skipped" and stages["refusal"]["reason"] == "probe failed"
    )
    (whole,) = [f for f in report["findings"] if f["subject"] is None]
    assert (whole["kind"], whole["severity"]) == ("import_error", "error")
    assert "RuntimeError: cudnn was built without its kernels" in whole["message"]
    # 1.32.0 documents every subject's knob: each one it cannot import is an error too
    per_subject = {f["subject"]: f["severity"] for f in report["findings"] if f["subject"]}
    assert per_subject == {name: "error" for name in report["capabilities"]}, report["findings"]
    assert not any(c["importable"] for c in report["capabilities"].values())

    out = tmp_path / "host.json"
    wheel = make_wheel(tmp_path / "w2", "1.10.0", NO_LIBCUDNN)
    proc = fe_ci("validate", str(wheel), "--json", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    probe = next(s for s in report["jobs"][0]["stages"] if s["name"] == "probe")
    assert report["verdict"] == "error" and probe["status"] == "error", probe
    assert "this host has none" in probe["reason"]


def test_previous_report_turns_a_lost_knob_into_a_regression(tmp_path: Path) -> None:
    newer = tmp_path / "newer.json"
    env132 = candidate_env("1.32.0")
    proc = fe_ci(
        "validate",
        "--preinstalled",
        "--python",
        str(env132.python),
        "--stages",
        "probe",
        "--json",
        str(newer),
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert json.loads(newer.read_text())["jobs"][0]["stages"][0]["status"] == "not_applicable"
    env127 = candidate_env("1.27.0")
    out = tmp_path / "older.json"
    proc = fe_ci(
        "validate",
        "--preinstalled",
        "--python",
        str(env127.python),
        "--stages",
        "probe",
        "--previous",
        str(newer),
        "--json",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    findings = json.loads(out.read_text())["findings"]
    lost = {f["subject"] for f in findings if f["kind"] == "feature_regression"}
    assert {"grouped_gemm_dsrelu", "flex_attention_bwd"} <= lost, (
        json.loads(newer.read_text())["capabilities"],
        findings,
    )


def test_bad_input_gets_a_clear_error(tmp_path: Path) -> None:
    """Each refusal says why, exits 4, and leaves no temp dir behind."""
    junk = tmp_path / "nvidia_cudnn_frontend-1.0.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = fe_ci("validate", str(junk), cwd=tmp_path, TMPDIR=str(temp))
    assert proc.returncode == 4 and "not a readable wheel" in proc.stderr
    proc = fe_ci("validate", str(tmp_path / "missing.whl"), cwd=tmp_path, TMPDIR=str(temp))
    assert proc.returncode == 4 and "no such file" in proc.stderr
    proc = fe_ci("validate", str(junk), "--stages", "probe,warp", cwd=tmp_path, TMPDIR=str(temp))
    assert proc.returncode == 4 and "unknown stage 'warp'" in proc.stderr
    proc = fe_ci("validate", cwd=tmp_path, TMPDIR=str(temp))
    assert proc.returncode == 4 and "--preinstalled" in proc.stderr
    assert list(temp.iterdir()) == []


def test_the_runners_own_dsl_cache_settings_do_not_reach_the_candidate(tmp_path: Path) -> None:
    """A runner started with the DSL's cache variables set (pointing where nobody can write)
    still sees flex attention: those variables are the runner's, not the candidate's."""
    out = tmp_path / "report.json"
    proc = fe_ci(
        "validate",
        "--preinstalled",
        "--python",
        str(candidate_env("1.32.0").python),
        "--stages",
        "probe",
        "--json",
        str(out),
        cwd=tmp_path,
        FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED="1",
        FLEX_ATTENTION_CUTE_DSL_CACHE_DIR="/dev/null/cache",
        CUTE_DSL_CACHE_DIR="/dev/null/cache",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    flex = json.loads(out.read_text())["capabilities"]["flex_attention_bwd"]
    assert flex["importable"] and flex["present"], flex["error"]


def test_a_repro_line_runs_and_selects_what_it_says(tmp_path: Path) -> None:
    wheel = registry_wheel("1.32.0")
    (tmp_path / wheel.name).symlink_to(wheel)
    config = "b4_h16_s2048_d128_causal"
    check = Check(
        name="sdpa_bwd.deterministic",
        status=Status.inconclusive,
        detail="deterministic arm byte-exact over 8 runs, but the control never varied",
        metrics={"config_name": config},
    )
    stage = StageResult(name=Stage.determinism, status=Status.inconclusive, checks=[check])
    job = JobReport(kind=JobKind.gpu, family="sm_90", status=JobState.finished, stages=[stage])
    report = BuildReport(
        source="wheel",
        filename=wheel.name,
        status=BuildStatus.finished,
        verdict=Verdict.inconclusive,
        jobs=[job],
    )
    line = repro.attach(report).jobs[0].stages[0].checks[0].repro
    assert line == (
        f"fe-ci validate {wheel.name} --stages determinism --subjects sdpa_bwd --config {config}"
    )
    program, *args = shlex.split(line)
    assert program == "fe-ci"
    # run it as written, beside the wheel (no GPU here: the subject is selected, then skipped)
    proc = fe_ci(*args, "--json", "r.json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    stages = {
        s["name"]: s for s in json.loads((tmp_path / "r.json").read_text())["jobs"][0]["stages"]
    }
    checks = {c["name"]: c for c in stages["determinism"]["checks"]}
    ran = checks.pop("sdpa_bwd.deterministic")
    assert ran["detail"] == "no CUDA GPU on this host"
    # the subjects --subjects left out say so
    assert {c["detail"] for c in checks.values()} == {"excluded by --subjects"}
    assert len(checks) == len(SUBJECTS) - 1
    for other in ("numerics", "refusal"):  # only the stage the line names
        assert stages[other]["status"] == "skipped"
        assert stages[other]["reason"] == "excluded by --stages"
    # a config the subject lacks is bad input, refused before anything is installed, naming
    # the configs the subject has
    args[args.index("--config") + 1] = "b99_none"
    proc = fe_ci(*args, "--json", "bad.json", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "unknown config 'b99_none'" in proc.stderr and config in proc.stderr
    assert "install" not in proc.stderr and not (tmp_path / "bad.json").exists()


def test_require_gates_the_exit_while_the_verdict_stays_incomplete(tmp_path: Path) -> None:
    """A run of the stages a CPU-only host can run: the verdict is incomplete (the determinism
    of no subject ran), yet requiring probe and refusal exits 0 (the same run without --require
    exits 2: test_validate_installs_probes_and_reports)."""
    wheel = registry_wheel("1.32.0")
    stages = ("--stages", "probe,refusal")
    proc = fe_ci(
        "validate", str(wheel), *stages, "--require", "probe,refusal", "--json", "r.json",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "incomplete"
    assert report["gate"]["require"] == ["probe", "refusal"]
    assert report["gate"]["conclusion"] == "success"
    # cause first: the verdict and the gate before the details
    out = proc.stdout
    assert out.index("verdict: incomplete") < out.index("gate (probe, refusal): success")
    assert out.index("gate (probe") < out.index("\ndid not run:\n") < out.index("\ndetails:")
    proc = fe_ci("validate", str(wheel), "--require", "probe,sm_120", cwd=tmp_path)
    assert proc.returncode == 4 and "unknown required check(s) sm_120" in proc.stderr
    assert "sm_100" in proc.stderr and "sdpa_bwd" in proc.stderr  # the known ones are listed
