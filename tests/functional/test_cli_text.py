"""The ``fe-ci`` command line as a newcomer meets it: the real CLI in a subprocess whose stdout is
a pipe (not a terminal), its help text and its exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from testkit import processes
from testkit.service import ROOT, Service
from testkit.wheels import make_wheel

EXIT_BAD_INPUT = 4


def fe_ci(*args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FE_CI_") and k != "COLUMNS"}
    env.update({"PYTHONPATH": str(ROOT), "FE_CI_RUNNER_LABELS": ""}, **extra_env)
    return processes.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env=env, text=True, timeout=120
    )


COMMANDS = ("serve", "runner", "submit", "validate", "configs", "bisect", "pin")


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each command's ``--help`` (and the program's), asked once for the module's tests."""
    cwd = tmp_path_factory.mktemp("help")
    return {c: fe_ci(*([c] if c else []), "--help", cwd=cwd) for c in ("", *COMMANDS)}


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_is_whole_and_plain_outside_a_terminal(
    command: str, helps: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    proc = helps[command]
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "…" not in text, text  # nothing cut short
    assert "``" not in text, text  # no reStructuredText markup
    assert not re.search(r"<(bool|str|path|int)>", text), text  # no type labels
    assert max(len(line) for line in text.splitlines()) <= 100, text
    if command == "validate":
        # the whole list of stages, not "probe,determinism,nu…", as its error lists them
        assert "build, install, probe, determinism, numerics, refusal" in text, text
        assert "4 bad input" in text
    if command == "":
        assert "4  bad input" in text and "2  inconclusive or incomplete" in text


def test_every_option_of_every_command_has_help(
    helps: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    for command in COMMANDS:
        text = helps[command].stdout
        options = text.split("Options:", 1)[1]
        for line in options.splitlines():
            if line.strip().startswith("--"):
                # "  --log-level LEVEL  debug, info, ..." : a lower-case name (typer 0.27 took a
                # metavar equal to the name in capitals for the name: "--PORT PORT"), then words
                assert re.match(r"\s+--[a-z][a-z0-9-]*( [A-Z]+)?\s{2,}\S", line), (command, line)


def test_submit_help_names_its_environment_and_its_timeout(
    helps: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    text = helps["submit"].stdout
    assert "FE_CI_URL" in text and "FE_CI_SUBMIT_TOKEN" in text
    assert "--timeout S" in text and "half an hour" in text and "3 no verdict" in text
    assert "3  no verdict" in helps[""].stdout  # the program's list of exit codes


def test_bad_input_has_its_own_exit_code(tmp_path: Path) -> None:
    """Not the 2 of inconclusive/incomplete: a script must tell a bad call from a weak verdict."""
    junk = tmp_path / "nvidia_cudnn_frontend-1.0.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    cases = [
        (("validate", str(junk)), "not a readable wheel"),
        (("validate", str(tmp_path / "missing.whl")), "no such file"),
        (("validate", str(junk), "--stages", "probe,warp"), "unknown stage 'warp'"),
        (("validate", "a.whl", "--stages", "warp"), "stages: build, install, probe, determinism"),
        (("validate", "--no-such-option"), "No such option"),
        (("validate", "a.whl", "b.whl"), "unexpected extra argument"),
        (("validate", "a.whl", "--require", "probe,warp"), "unknown required check(s) warp"),
        (("validate", "a.whl", "--subjects", "sdpa_bwd", "--config", "b0"), "unknown config"),
        (("configs", "warp"), "unknown subject 'warp'"),
    ]
    for args, words in cases:
        proc = fe_ci(*args, cwd=tmp_path)
        assert proc.returncode == EXIT_BAD_INPUT, (args, proc.returncode, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
    # a setting that does not parse is bad input too, named, with no traceback
    for args in (("validate", "a.whl"), ("submit", "a.whl"), ("runner",)):
        proc = fe_ci(*args, cwd=tmp_path, FE_CI_SANDBOX="jail")
        assert proc.returncode == EXIT_BAD_INPUT, (args, proc.stderr)
        assert "error: bad configuration: FE_CI_SANDBOX: " in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_submit_of_a_short_commit_answers_in_words(tmp_path: Path, module_service: Service) -> None:
    before = module_service.count("builds")
    proc = fe_ci(
        "submit", "--commit", "abc", cwd=tmp_path, FE_CI_URL=module_service.url,
        FE_CI_SUBMIT_TOKEN=module_service.env["FE_CI_SUBMIT_TOKEN"],
    )  # fmt: skip
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert "not a full commit id" in proc.stderr and "40 hex" in proc.stderr, proc.stderr
    assert '{"commit"' not in proc.stderr and "\\" not in proc.stderr
    assert module_service.count("builds") == before


def test_the_same_file_gets_the_same_words_from_every_command(tmp_path: Path) -> None:
    """A file that is not a wheel, or no file: ``validate`` and ``submit`` say one thing, exit 4,
    before any service is asked (none runs here)."""
    junk = tmp_path / "nvidia_cudnn_frontend-1.0.0-py3-none-any.whl"
    junk.write_bytes(b"not a zip")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a wheel")
    empty_zip = tmp_path / "nvidia_cudnn_frontend-1.0.1-py3-none-any.whl"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("cudnn/__init__.py", "")
    for path, words in (
        (junk, "is not a readable wheel: File is not a zip file"),
        (notes, "is not a readable wheel: its name does not end in .whl"),
        (empty_zip, "is not a readable wheel: it has no .dist-info/METADATA"),
        (tmp_path / "missing.whl", "no such file"),
    ):
        said = {
            command: fe_ci(command, str(path), cwd=tmp_path, FE_CI_URL="http://127.0.0.1:9",
                           FE_CI_SUBMIT_TOKEN="x")
            for command in ("validate", "submit")
        }  # fmt: skip
        for command, proc in said.items():
            assert proc.returncode == EXIT_BAD_INPUT, (command, path, proc.stderr)
            assert words in proc.stderr, (command, proc.stderr)
        assert said["validate"].stderr == said["submit"].stderr, path


def test_a_refused_submission_is_said_in_words(tmp_path: Path, module_service: Service) -> None:
    """A readable wheel the service's checks refuse (another distribution's name)."""
    made = make_wheel(tmp_path / "w", "1.0.0", "")
    other = made.rename(made.with_name("other_package-1.0.0-py3-none-any.whl"))
    proc = fe_ci(
        "submit", str(other), cwd=tmp_path, FE_CI_URL=module_service.url,
        FE_CI_SUBMIT_TOKEN=module_service.env["FE_CI_SUBMIT_TOKEN"],
    )  # fmt: skip
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert proc.stderr.startswith("error: the service refused the submission: "), proc.stderr
    proc = fe_ci(
        "submit", str(other), cwd=tmp_path, FE_CI_URL=module_service.url, FE_CI_SUBMIT_TOKEN="wrong"
    )
    assert proc.returncode == 3 and "check FE_CI_SUBMIT_TOKEN" in proc.stderr, proc.stderr
