"""``fe-ci``: serve, runner, submit, validate, bisect (``bisect_cli.py``).

What the commands share is ``cli_common.py``. The service is imported only inside ``serve``, so a
runner host needs none of its dependencies. Help is plain Click text, wrapped at a fixed width
whether or not stdout is a terminal, so a piped ``--help`` is never cut short.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Annotated

import httpx
import typer

from runner import (
    bisect_cli,
    envs,
    history,
    labels,
    localreport,
    memory,
    pipeline,
    pipeline_options,
)
from runner.cli_common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_REFUSED,
    LOG_LEVEL,
    WHEEL_ARG,
    fail,
    parse_stages,
    setup_logging,
)
from runner.config import RunnerSettings
from runner.inside.registry import SUBJECTS
from runner.verdict import EXIT_CODES
from runner.wire import BuildReport, Capability, RememberedConfig, Verdict

HELP = """fe-ci validates builds of NVIDIA's cuDNN frontend against its determinism contract.

\b
Exit codes (validate, and submit --wait):
  0  pass
  1  fail or error (or the service could not be reached or answered with an error)
  2  inconclusive or incomplete
  3  a runner the service refused (a bad or revoked token), or one that cannot start
  4  bad input: a file that is not a wheel, an unknown stage, a wrong option or argument
"""
_WIDTH = 100

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=HELP,
    rich_markup_mode=None,
    context_settings={"max_content_width": _WIDTH, "terminal_width": _WIDTH},
)


# ------------------------------------------------------------------------------------- serve


@app.command()
def serve(
    host: Annotated[
        str, typer.Option("--host", metavar="HOST", help="interface to bind")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="port to listen on")] = 8080,
    log_level: Annotated[str, LOG_LEVEL] = "info",
) -> None:
    """Run the service (API, dashboard, runner protocol)."""
    import uvicorn

    from service.app import create_app
    from service.config import Settings
    from service.limits import uvicorn_options

    setup_logging(log_level)
    try:
        settings = Settings()
    except ValueError as exc:
        raise fail(f"bad configuration: {exc}") from exc
    application = create_app(settings)
    log = logging.getLogger("fe_ci.service")
    log.info(
        "event=serving url=http://%s:%s data_dir=%s tokens=%s",
        host,
        port,
        settings.data_dir.resolve(),
        settings.tokens_file.resolve(),
    )
    uvicorn.run(
        application,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        **uvicorn_options(settings),
    )


# ------------------------------------------------------------------------------------ runner


@app.command()
def runner(
    once: Annotated[bool, typer.Option("--once", help="take at most one job, then exit")] = False,
    replace: Annotated[
        bool,
        typer.Option(
            "--replace",
            help="take over the name of a runner that is still registered and alive "
            "(its token stops working); also FE_CI_RUNNER_REPLACE",
        ),
    ] = False,
    log_level: Annotated[str, LOG_LEVEL] = "info",
) -> None:
    """Run a runner: claim jobs from the service at FE_CI_URL and run them.

    \b
    Environment: FE_CI_URL (the service, default http://127.0.0.1:8080), FE_CI_RUNNER_TOKEN (the
    registration token), FE_CI_RUNNER_NAME, FE_CI_RUNNER_LABELS (e.g. arch=sm_90,builder=1).
    The runner tells the service when it stops cleanly (--once, SIGTERM, Ctrl-C).
    """
    from runner.agent import Agent, preflight

    setup_logging(log_level)
    problem = preflight()
    if problem is not None:
        raise fail(problem, EXIT_REFUSED)
    settings = RunnerSettings()
    if replace:
        settings = settings.model_copy(update={"runner_replace": True})
    agent = Agent(settings, once=once)
    agent.install_signal_handlers()
    raise typer.Exit(agent.run())


# ------------------------------------------------------------------------------------ submit


@app.command()
def submit(
    wheel: Annotated[Path | None, WHEEL_ARG] = None,
    commit: Annotated[
        str | None,
        typer.Option(metavar="SHA", help="the full 40-hex id of a commit of the repository"),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait for the verdict; exit as validate does")
    ] = False,
) -> None:
    """Submit WHEEL (a nvidia-cudnn-frontend wheel) or --commit SHA to a running service.

    \b
    Environment: FE_CI_URL (the service, default http://127.0.0.1:8080) and
    FE_CI_SUBMIT_TOKEN (the submit token; beside a local service it is read from
    ./data/tokens.env, or FE_CI_DATA_DIR/tokens.env).
    """
    s = RunnerSettings()
    token = s.token("submit_token")
    if not token:
        raise fail("set FE_CI_SUBMIT_TOKEN (or run beside the service's data directory)")
    if (wheel is None) == (commit is None):
        raise fail("give a WHEEL or --commit SHA (one of them)")
    if commit is not None and not _SHA.fullmatch(commit.lower()):
        raise fail(
            f"--commit {commit!r} is not a full commit id: give all 40 hex digits "
            "(`git rev-parse HEAD` prints them)"
        )
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=s.url, timeout=600.0) as http:
        try:
            if wheel is not None:
                if not wheel.is_file():
                    raise fail(f"no such file: {wheel}")
                with wheel.open("rb") as fh:
                    resp = http.post(
                        "/validate",
                        files={"wheel": (wheel.name, fh, "application/octet-stream")},
                        headers=headers,
                    )
            else:
                resp = http.post("/validate", json={"commit": commit}, headers=headers)
        except httpx.TransportError as exc:
            raise fail(f"cannot reach the service at {s.url}: {exc}", EXIT_FAILED) from exc
        if resp.status_code != 202:
            raise _refused(resp, s.url)
        body = resp.json()
        typer.echo(f"build {body['build_id']}: {s.url.rstrip('/')}{body['url']}")
        if not wait:
            return
        while True:
            report = BuildReport.model_validate(http.get(f"/api/builds/{body['build_id']}").json())
            if report.verdict != Verdict.pending:
                typer.echo(f"verdict: {report.verdict.value} ({report.verdict_reason})")
                raise typer.Exit(EXIT_CODES[report.verdict])
            time.sleep(1.0)


_SHA = re.compile(r"[0-9a-f]{40}")


def _refused(resp: httpx.Response, url: str) -> typer.Exit:
    """The service's error answer, said in words for a person at a terminal."""
    try:
        err = resp.json().get("error", {})
    except ValueError:
        err = {}
    message = str(err.get("message") or resp.reason_phrase)
    if resp.status_code in (401, 403):
        return fail(
            f"the service at {url} does not accept this submit token: check FE_CI_SUBMIT_TOKEN "
            f"({message})",
            EXIT_FAILED,
        )
    if 400 <= resp.status_code < 500:
        return fail(f"the service refused the submission: {message}")
    return fail(
        f"the service at {url} failed ({resp.status_code}): {message}; see its log", EXIT_FAILED
    )


# ---------------------------------------------------------------------------------- validate


def _parse_subjects(text: str | None) -> list[str] | None:
    if not text:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in SUBJECTS]
    if unknown:
        raise fail(f"unknown subject(s) {unknown}; subjects: {', '.join(SUBJECTS)}")
    return names


def _load_previous(path: Path) -> tuple[dict[str, Capability], list[RememberedConfig], BuildReport]:
    """The previous report: its capabilities (feature regression), chosen configs (its start),
    and itself (deterministic bits and cost)."""
    try:
        data = json.loads(path.read_text())
        caps = {k: Capability.model_validate(v) for k, v in data["capabilities"].items()}
        report = BuildReport.model_validate(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"--previous {path}: not a build report ({exc})") from exc
    return caps, memory.from_report(report), report


def _build_commit(s: RunnerSettings, repo: str, commit: str, work: Path) -> Path:
    """The commit's wheel, built as a builder runner builds it."""
    from runner import build

    typer.echo(f"building {commit[:12]} of {repo}", err=True)
    result, built = build.run_build(
        repo,
        commit,
        cache_dir=Path(s.cache_dir),
        work=work,
        timeout_s=s.stage_timeout_s,
        index_url=s.index_url,
        wheelhouse=s.wheelhouse,
    )
    if built is None:
        raise fail(f"the build failed: {result.reason}", EXIT_FAILED)
    return built.wheel


def _wheel_version(wheel: Path | None) -> str | None:
    if wheel is None:
        return None
    try:
        return envs.read_wheel_metadata(wheel).version
    except (OSError, ValueError, StopIteration, KeyError, zipfile.BadZipFile) as exc:
        raise fail(f"{wheel} is not a readable wheel: {exc}") from exc


@app.command()
def validate(
    wheel: Annotated[Path | None, WHEEL_ARG] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="write the report here")
    ] = None,
    stages: Annotated[
        str | None,
        typer.Option(
            "--stages",
            metavar="STAGES",
            help="comma-separated, from: install, probe, determinism, numerics, refusal "
            "(default: all of them)",
        ),
    ] = None,
    previous: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="an earlier report of the line (feature regression)"),
    ] = None,
    preinstalled: Annotated[
        bool,
        typer.Option(
            "--preinstalled", help="the candidate is already importable here: no install stage"
        ),
    ] = False,
    python: Annotated[
        Path | None,
        typer.Option(
            "--python", metavar="PYTHON", help="with --preinstalled: the Python that has it"
        ),
    ] = None,
    negative_control: Annotated[
        bool,
        typer.Option(
            "--negative-control", help="diagnostic: run the deterministic arm with the knob off"
        ),
    ] = False,
    work_dir: Annotated[
        Path | None, typer.Option(metavar="DIR", help="keep the environment and logs here")
    ] = None,
    subjects: Annotated[
        str | None,
        typer.Option(
            "--subjects",
            metavar="SUBJECTS",
            help="comma-separated subjects for determinism and numerics",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            metavar="CONFIG",
            help="run the selected subjects at this config, no escalation",
        ),
    ] = None,
    commit: Annotated[
        str | None,
        typer.Option(metavar="SHA", help="build this commit of --repo with the builder first"),
    ] = None,
    repo: Annotated[
        str, typer.Option(metavar="URL", help="with --commit: the repository (URL or path)")
    ] = "https://github.com/NVIDIA/cudnn-frontend.git",
) -> None:
    """Run the runner pipeline on WHEEL (or the preinstalled candidate), locally, no service.

    \b
    Exit codes: 0 pass; 1 fail or error; 2 inconclusive or incomplete;
    4 bad input (not a wheel, no such file, an unknown stage, a wrong option).
    """
    s = RunnerSettings()
    if wheel is None and commit is None and not preinstalled:
        raise fail("give a WHEEL, --commit SHA, or --preinstalled for the importable candidate")
    selected = parse_stages(stages)
    chosen_subjects = _parse_subjects(subjects)
    prev, remembered, prev_report = _load_previous(previous) if previous else (None, [], None)
    if wheel is not None and not wheel.is_file():
        raise fail(f"no such file: {wheel}")
    tmp = Path(tempfile.mkdtemp(prefix="fe-ci-validate-")) if work_dir is None else work_dir
    try:  # bad input found from here on leaves no temp dir behind
        if commit is not None:
            wheel = _build_commit(s, repo, commit, tmp / "build")
        version = _wheel_version(wheel)
    except typer.Exit:
        if work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    gpu = labels.host_labels(s.runner_labels)
    family = gpu.get("arch")
    opts = pipeline_options.Options.from_settings(
        s,
        stages=selected,
        work_dir=tmp,
        preinstalled=preinstalled,
        candidate_python=python,
        negative_control=negative_control,
        family=family,
        gpu=gpu.get("gpu"),
        previous=prev,
        remembered=remembered,
        subjects=chosen_subjects,
        pin_config=config,
    )
    where = f"{gpu.get('gpu')} ({family})" if family else "no GPU"
    typer.echo(
        f"validating {wheel.name if wheel else 'the preinstalled candidate'} on {where}", err=True
    )
    pipe = pipeline.Pipeline(opts, localreport.Progress())
    try:
        result = pipe.run(wheel)
        report = localreport.local_report(result, wheel=wheel, family=family, version=version)
    finally:
        if work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if prev_report is not None:  # deterministic bits and cost against the earlier report
        report.history, changed = history.compare_reports(report, prev_report, s.cost_factor)
        report.findings += changed
    if commit is not None:
        report.source, report.repo, report.commit = "commit", repo, commit
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(report.model_dump_json(indent=2))
    localreport.print_report(report)
    raise typer.Exit(EXIT_CODES[report.verdict])


app.command()(bisect_cli.bisect)


def main() -> None:
    """The entry point: a wrong option or argument exits EXIT_BAD_INPUT, as bad input does, so that
    Click's usage-error status (2) is never read as the verdict ``inconclusive``/``incomplete``."""
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # Click's errors; 2 is its usage error
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        code = getattr(exc, "exit_code", EXIT_FAILED)
        code = EXIT_BAD_INPUT if code == 2 else code
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        code = EXIT_FAILED
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
