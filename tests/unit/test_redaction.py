"""One tokens file, read one way: the service that writes it, the runner that reads its tokens and
its secrets from it, and a file that is not text (``core/redaction.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.redaction import read_tokens, redact_text
from runner.config import RunnerSettings
from service.config import Settings
from service.results import logs


def test_the_service_writes_the_tokens_the_runner_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FE_CI_SUBMIT_TOKEN", "FE_CI_RUNNER_TOKEN", "FE_CI_ADMIN_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    service = Settings(data_dir=tmp_path).with_generated_tokens()
    runner = RunnerSettings(data_dir=tmp_path)
    assert runner.token("runner_token") == service.runner_token
    assert runner.token("submit_token") == service.submit_token
    assert service.admin_token in runner.secrets()
    again = Settings(data_dir=tmp_path).with_generated_tokens()
    assert again.runner_token == service.runner_token  # generated once, then read back


def test_a_tokens_file_that_is_not_text_or_not_there_holds_no_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.env"
    assert read_tokens(path) == {}
    path.write_bytes(b"FE_CI_RUNNER_TOKEN=\xff\xfe\n")
    assert read_tokens(path) == {}
    path.write_text(" FE_CI_ADMIN_TOKEN = padded-value \nOTHER=x\nno equals sign\n")
    assert read_tokens(path) == {"FE_CI_ADMIN_TOKEN": "padded-value"}


def test_the_service_and_the_runner_redact_alike() -> None:
    settings = Settings(submit_token="submit-token-abc", runner_token="runner-token-abcdef")
    secrets = logs.secret_values(settings, "lease", "a-lease-token-value")
    assert "lease" not in secrets  # under 8 characters: never a secret
    text = "runner-token-abcdef and a-lease-token-value and submit-token-abc"
    assert redact_text(text, secrets) == "[redacted] and [redacted] and [redacted]"
