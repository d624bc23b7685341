"""``fe-ci serve``, ``fe-ci runner`` and ``fe-ci submit``: the service, a runner of it, and a
build handed to it.

The service is imported only inside ``serve``, so a runner host needs none of its dependencies.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import httpx
import typer

from cli import waiting
from cli.common import (
    EXIT_NO_VERDICT,
    EXIT_REFUSED,
    LOG_LEVEL,
    WHEEL_ARG,
    fail,
    runner_settings,
    setup_logging,
    wheel_version,
)
from core import commits, gate
from core.verdict import EXIT_CODES
from runner.pipeline import localreport


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
            "(its token stops working)",
        ),
    ] = False,
    log_level: Annotated[str, LOG_LEVEL] = "info",
) -> None:
    """Run a runner: claim jobs from the service at FE_CI_URL and run them, until stopped.

    The runner tells the service when it stops cleanly (--once, SIGTERM, Ctrl-C). Exit 3: the
    service refused it (a bad or revoked token), or it cannot start (no torch here).
    """
    from runner.agent.agent import Agent, preflight

    setup_logging(log_level)
    problem = preflight()
    if problem is not None:
        raise fail(problem, EXIT_REFUSED)
    settings = runner_settings()
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
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="S",
            min=1,
            show_default=False,
            help="with --wait: give up after S seconds without a verdict, exit 3; the build goes "
            f"on [default: {waiting.DEFAULT_TIMEOUT_S:g}, half an hour]",
        ),
    ] = waiting.DEFAULT_TIMEOUT_S,
) -> None:
    """Submit WHEEL (a nvidia-cudnn-frontend wheel) or --commit SHA to a running service.

    \b
    Exit codes: without --wait, 0 submitted; with --wait, as validate: 0 pass, 1 fail or error,
    2 inconclusive or incomplete (by the gate where FE_CI_REQUIRE chooses checks);
    3 no verdict: the service away, refusing the token or failing, or --timeout passed;
    4 bad input (not a wheel, no such file, a short commit id).
    """
    s = runner_settings()
    if (wheel is None) == (commit is None):
        raise fail("give a WHEEL or --commit SHA (one of them)")
    if commit is not None and not commits.is_full_sha(commit.lower()):
        raise fail(
            f"--commit {commit!r} is not a full commit id: give all 40 hex digits "
            "(`git rev-parse HEAD` prints them)"
        )
    if wheel is not None:
        wheel_version(wheel)  # the same words as validate's for a file that is not a wheel
    token = s.token("submit_token")
    if not token:
        raise fail("set FE_CI_SUBMIT_TOKEN (or run beside the service's data directory)")
    headers = {"Authorization": f"Bearer {token}"}
    # bounded: a host that never connects, or a service that takes a body and never answers
    with httpx.Client(base_url=s.url, timeout=httpx.Timeout(120.0, connect=10.0)) as http:
        try:
            if wheel is not None:
                with wheel.open("rb") as fh:
                    resp = http.post(
                        "/validate",
                        files={"wheel": (wheel.name, fh, "application/octet-stream")},
                        headers=headers,
                    )
            else:
                resp = http.post("/validate", json={"commit": commit}, headers=headers)
        except httpx.TransportError as exc:
            raise fail(f"cannot reach the service at {s.url}: {exc}", EXIT_NO_VERDICT) from exc
        if resp.status_code != 202:
            raise _refused(resp, s.url)
        body = resp.json()
        typer.echo(f"build {body['build_id']}: {s.url.rstrip('/')}{body['url']}")
        if not wait:
            return
        report = waiting.wait(http, int(body["build_id"]), s.url, timeout)
    localreport.print_cause(report)
    g = report.gate
    if g is not None and g.require != [gate.ALL]:
        raise typer.Exit(gate.EXIT_CODES[g.conclusion])
    raise typer.Exit(EXIT_CODES[report.verdict])


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
            EXIT_NO_VERDICT,
        )
    if resp.status_code in (408, 429):  # busy, or the upload too slow: try again later
        return fail(f"the service at {url} did not take it now: {message}", EXIT_NO_VERDICT)
    if 400 <= resp.status_code < 500:
        return fail(f"the service refused the submission: {message}")
    return fail(
        f"the service at {url} failed ({resp.status_code}): {message}; see its log",
        EXIT_NO_VERDICT,
    )
