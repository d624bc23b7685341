"""What a candidate's processes are given of the runner's environment
(``runner/isolation/allowlist.py``), and how a runner secret is taken out of what a candidate wrote
(``runner/isolation/redact.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.wire import Check, Stage, StageResult, Status
from runner.config import RunnerSettings
from runner.isolation import allowlist, candidate, redact
from runner.pipeline import stage_results

RUNNER = {
    "PATH": "/usr/local/bin:/usr/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "CUDA_VISIBLE_DEVICES": "0",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "FE_CI_RUNNER_TOKEN": "runner-registration-token",
    "FE_CI_SUBMIT_TOKEN": "submit-token-value",
    "FE_CI_WEBHOOK_SECRET": "webhook-secret-value",
    "FE_CI_ADMIN_TOKEN": "admin-token-value",
    "FE_CI_GITHUB_TOKEN": "ghp_githubtokenvalue",
    "FE_CI_URL": "http://127.0.0.1:8080",
    "FE_CI_CACHE_DIR": "/cache",
    "FE_CI_EXTRA_SUBJECTS": "/srv/extra_subjects",
    "GITHUB_TOKEN": "ghp_othertokenvalue",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "PIP_INDEX_URL": "https://index.example/simple",
    "UV_INDEX_PRIVATE_PASSWORD": "uv-password-value",
    "CC": "gcc",
    "FETCHCONTENT_SOURCE_DIR_DLPACK": "/opt/dlpack",
    "SSH_AUTH_SOCK": "/run/ssh.sock",
    "PYTHONPATH": "/work/fe-ci",
    "CUTE_DSL_CACHE_DIR": "/root/.cache/cute",
}
SECRETS = [v for k, v in RUNNER.items() if "TOKEN" in k or "SECRET" in k or "PASSWORD" in k]


def test_a_stage_gets_the_allowlist_and_nothing_else() -> None:
    env = allowlist.candidate_environ(
        "stage",
        home=Path("/job/box/home"),
        path=[Path("/job/env/bin")],
        pythonpath=Path("/job/src"),
        chosen={"CUDA_VISIBLE_DEVICES": ""},
        environ=RUNNER,
    )
    assert env == {
        "PATH": "/job/env/bin:/usr/local/bin:/usr/bin",
        "HOME": "/job/box/home",
        "TMPDIR": "/job/box/home",
        "USER": "fe-ci-candidate",  # a job's uid has no passwd entry; getpass.getuser() works
        "LOGNAME": "fe-ci-candidate",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CUDA_VISIBLE_DEVICES": "",  # the runner's choice wins over the host's
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "FE_CI_EXTRA_SUBJECTS": "/srv/extra_subjects",
        "PYTHONPATH": "/job/src",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


@pytest.mark.parametrize("kind", ["stage", "install", "build"])
def test_no_kind_of_candidate_process_gets_a_secret_or_a_runner_setting(
    kind: allowlist.Kind,
) -> None:
    env = allowlist.candidate_environ(kind, home=Path("/h"), environ=RUNNER)
    for secret in SECRETS:
        assert secret not in env.values(), kind
    assert not [k for k in env if k.startswith("FE_CI_") and k != "FE_CI_EXTRA_SUBJECTS"]
    assert "SSH_AUTH_SOCK" not in env and "CUTE_DSL_CACHE_DIR" not in env
    assert env["HOME"] == env["TMPDIR"] == "/h"


def test_installers_and_builds_get_their_tools_settings_and_stages_do_not() -> None:
    stage = allowlist.candidate_environ("stage", home=Path("/h"), environ=RUNNER)
    install = allowlist.candidate_environ("install", home=Path("/h"), environ=RUNNER)
    build = allowlist.candidate_environ("build", home=Path("/h"), environ=RUNNER)
    assert "PIP_INDEX_URL" not in stage and install["PIP_INDEX_URL"] == RUNNER["PIP_INDEX_URL"]
    assert "CC" not in install and build["CC"] == "gcc"
    assert build["FETCHCONTENT_SOURCE_DIR_DLPACK"] == "/opt/dlpack"
    assert "UV_INDEX_PRIVATE_PASSWORD" not in build  # a tool's setting, but a secret


def test_the_runner_cannot_choose_to_hand_over_a_secret() -> None:
    with pytest.raises(ValueError, match="names a secret"):
        allowlist.candidate_environ(
            "stage", home=Path("/h"), chosen={"FE_CI_RUNNER_TOKEN": "x"}, environ=RUNNER
        )


def test_the_runners_secrets_come_from_its_environment_settings_and_tokens_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(RUNNER):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("FE_CI_WEBHOOK_SECRET", "webhook-secret-value")
    monkeypatch.setenv("FE_CI_SUBMIT_TOKEN", "short")  # under 8 characters: never redacted
    (tmp_path / "tokens.env").write_text("FE_CI_ADMIN_TOKEN=generated-admin-token\nOTHER=x\n")
    settings = RunnerSettings(data_dir=tmp_path, runner_token="from-the-settings")
    found = settings.secrets()
    assert set(found) == {"webhook-secret-value", "generated-admin-token", "from-the-settings"}
    assert [len(s) for s in found] == sorted((len(s) for s in found), reverse=True)


def test_redaction_takes_every_secret_out_of_a_document_and_a_log() -> None:
    secrets = redact.runner_secrets(RUNNER)
    doc = {
        "status": "pass",
        "capabilities": {
            "sdpa_bwd": {
                "importable": False,
                "error": f"ImportError: {RUNNER['FE_CI_RUNNER_TOKEN']}",
            }
        },
        "checks": [{"name": "x", "detail": f"token={RUNNER['GITHUB_TOKEN']}!"}],
        RUNNER["FE_CI_SUBMIT_TOKEN"]: [RUNNER["FE_CI_WEBHOOK_SECRET"], 3, None],
    }
    clean = redact.redact(doc, secrets)
    text = repr(clean)
    for secret in SECRETS:
        assert secret not in text
    assert clean["capabilities"]["sdpa_bwd"]["error"] == "ImportError: [redacted]"
    assert clean["checks"][0]["detail"] == "token=[redacted]!"
    assert clean["[redacted]"] == ["[redacted]", 3, None]
    log = "env: " + " ".join(f"{k}={v}" for k, v in RUNNER.items())
    cleaned = redact.redact_text(log, secrets)
    assert not [s for s in SECRETS if s in cleaned] and cleaned.count("[redacted]") == len(SECRETS)
    assert "LANG=C.UTF-8" in cleaned  # what is no secret stays


def test_a_stage_result_leaves_the_runner_redacted() -> None:
    token = RUNNER["FE_CI_RUNNER_TOKEN"]
    result = StageResult(
        name=Stage.probe,
        status=Status.error,
        reason=f"failed: {token}",
        log_tail=f"Traceback ... {token}\n",
        checks=[Check(name="probe.x", status=Status.fail, detail=token)],
    )
    clean = stage_results.redacted(result, redact.runner_secrets(RUNNER))
    assert token not in clean.model_dump_json()
    assert clean.reason == "failed: [redacted]" and clean.checks[0].detail == "[redacted]"


def test_a_stage_document_is_never_read_through_a_link(tmp_path: Path) -> None:
    """The document lies in a directory the candidate owned: a link to a file of the runner's is
    refused, not followed (its content would otherwise be parsed, and quoted in the reason)."""
    secret = tmp_path / "tokens.env"
    secret.write_text('{"status": "pass", "stolen": "FE_CI_RUNNER_TOKEN=x"}')
    doc = tmp_path / "probe.result.json"
    doc.symlink_to(secret)
    assert candidate.read_doc(Stage.probe, doc) == (
        {},
        "unreadable (Too many levels of symbolic links)",
    )


def test_a_stage_log_leaves_the_runner_redacted_even_where_it_is_cut(tmp_path: Path) -> None:
    token = RUNNER["FE_CI_RUNNER_TOKEN"]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "probe.log").write_text("a" * 300 + token + "b" * 100 + f" {token} end\n")
    secrets = redact.runner_secrets(RUNNER)
    whole = stage_results.stage_log(tmp_path, Stage.probe, secrets=secrets)
    assert whole is not None and token not in whole and whole.count("[redacted]") == 2

    def tails(text: str) -> list[str]:  # what is left of the token where a cut went through it
        body = text.split("\n", 1)[1]  # after the note that says the log was cut
        return [token[i:] for i in range(1, len(token) - 3) if body.startswith(token[i:])]

    # a limit whose cut, unredacted, would begin inside the first token: its tail would leave
    limit = next(
        n
        for n in range(100, 300)
        if tails(stage_results.stage_log(tmp_path, Stage.probe, limit=n) or "")
    )
    cut = stage_results.stage_log(tmp_path, Stage.probe, limit=limit, secrets=secrets)
    assert cut is not None and len(cut) <= limit and cut.endswith("[redacted] end\n")
    assert not [t for t in (token[i:] for i in range(len(token) - 3)) if t in cut]
