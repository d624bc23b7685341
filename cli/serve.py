"""``fe-ci serve``, ``fe-ci runner`` and ``fe-ci submit``: the service, a runner of it, and a
build handed to it.

The service is imported only inside ``serve``, so a runner host needs none of its dependencies.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from cli import progress
from cli.common import EXIT_FAILED, EXIT_REFUSED, LOG_LEVEL, WHEEL_ARG, fail, setup_logging
from core import commits, gate
from core.verdict import EXIT_CODES
from core.wire import BuildReport, JobState, Verdict
from runner.config import RunnerSettings


def serve(
    host: Annotated[
        str, typer.Option("--host", metavar="HOST", help="interface to bind")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="port to listen on")] = 8080,
    log_level: Annotated[str, LOG_LEVEL] = "info",
) -> None:
    """Run the service (API, dashboard, runner protocol)."""
    import uvicorn
    from pydantic import ValidationError

    from service.app import create_app
    from service.config import Settings
    from service.uploads.client_limits import uvicorn_options

    setup_logging(log_level)
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"FE_CI_{str(e['loc'][0]).upper() if e['loc'] else '?'}: "
            + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise fail(f"bad configuration, the service does not start: {problems}") from exc
    except ValueError as exc:
        raise fail(f"bad configuration, the service does not start: {exc}") from exc
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
    from runner.agent.agent import Agent, preflight

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


def submit(
    wheel: Annotated[Path | None, WHEEL_ARG] = None,
    commit: Annotated[
        str | None,
        typer.Option(metavar="SHA", help="the full 40-hex id of a commit of the repository"),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="wait for the verdict, saying what the build waits for; exit as validate does "
            "(by the gate where the service requires chosen checks, FE_CI_REQUIRE)",
        ),
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
    if commit is not None and not commits.is_full_sha(commit.lower()):
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
        with progress.Waiting() as shown:
            while True:
                got = http.get(f"/api/builds/{body['build_id']}")
                report = BuildReport.model_validate(got.json())
                if report.verdict != Verdict.pending:
                    break
                shown.update(state_line(report))
                time.sleep(1.0)
        typer.echo(f"verdict: {report.verdict.value} ({report.verdict_reason})")
        for c in report.causes:
            typer.echo(f"  {c.status} {c.name}: {c.reason}")
        g = report.gate
        if g is not None:
            typer.echo(f"gate ({', '.join(g.require)}): {g.conclusion.value}: {g.reason}")
        if g is not None and g.require != [gate.ALL]:
            raise typer.Exit(gate.EXIT_CODES[g.conclusion])
        raise typer.Exit(EXIT_CODES[report.verdict])


def state_line(report: BuildReport) -> str:
    """What a pending build waits for, job by job: "sm_100 job: waiting: no runner with
    arch=sm_100 is alive"."""
    parts = []
    for j in report.jobs:
        label = f"{j.family or j.kind.value} job"
        if j.status == JobState.queued:
            parts.append(f"{label}: waiting: {j.waiting}" if j.waiting else f"{label}: queued")
        elif j.status == JobState.waiting:
            parts.append(f"{label}: waiting for the build job's wheel")
        elif j.status == JobState.leased:
            done = len(j.stages)
            parts.append(f"{label}: running on {j.runner or 'a runner'} ({done} stages done)")
    return f"build {report.id}: {'; '.join(parts) or report.status.value}"


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
