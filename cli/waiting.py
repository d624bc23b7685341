"""``fe-ci submit --wait``: follow a submitted build to its verdict, never for ever.

While the build is pending it says what each job waits for, and where no runner that could take
a job is alive, the command that starts one. The wait ends with the verdict (said as ``fe-ci
validate`` says it, what did not run included), or without one: the ``--timeout`` passed, or the
service stopped answering for that long, or answered with an error (exit 3, never the 1 of a red
build).
"""

from __future__ import annotations

import time

import httpx
from pydantic import ValidationError

from cli import progress
from cli.common import EXIT_NO_VERDICT, fail
from core import cells
from core.text import plural
from core.wire import BuildReport, JobKind, JobReport, JobState, Verdict

DEFAULT_URL = "http://127.0.0.1:8080"  # RunnerSettings' default: no FE_CI_URL= to say
DEFAULT_TIMEOUT_S = 1800.0  # submit --wait: half an hour, then exit 3 (the build goes on)
POLL_S = 1.0
READ_S = 30.0  # one status read at most


def start_runner(job: JobReport, url: str) -> str:
    """The command that starts a runner able to take ``job``, for a person at a terminal: a
    cell's job on another cuDNN backend than the host's names the label that offers it."""
    where = "" if url.rstrip("/") == DEFAULT_URL else f"FE_CI_URL={url} "
    if job.kind == JobKind.gpu:
        cell = job.cell or ""
        wanted = cells.Cell.parse(cell).requirements if cells.is_cell(cell) else {}
        wanted.pop(cells.ARCH, None)  # the host's GPU says its family
        labels = f"FE_CI_RUNNER_LABELS={cells.requires_text(wanted)} " if wanted else ""
        return f"on a host with an {job.family} GPU: {where}{labels}fe-ci runner"
    labels = "FE_CI_RUNNER_LABELS=builder=1 " if job.kind == JobKind.build else ""
    return f"{where}{labels}fe-ci runner"


def state_line(report: BuildReport, url: str = DEFAULT_URL) -> str:
    """What a pending build waits for, job by job ("sm_100 job: waiting: no runner with
    arch=sm_100 is alive"), and, where no runner could take a job, how to start one."""
    parts: list[str] = []
    hints: list[str] = []
    for j in report.jobs:
        label = f"{j.family or j.kind.value} job"
        if j.status == JobState.queued:
            parts.append(f"{label}: waiting: {j.waiting}" if j.waiting else f"{label}: queued")
            if j.waiting:
                hints.append(start_runner(j, url))
        elif j.status == JobState.waiting:
            parts.append(f"{label}: waiting for the build job's wheel")
        elif j.status == JobState.leased:
            done = plural(len(j.stages), "stage")
            parts.append(f"{label}: running on {j.runner or 'a runner'} ({done} done)")
    line = f"build {report.id}: {'; '.join(parts) or report.status.value}"
    if hints:
        line += "\n  start a runner: " + "; or ".join(dict.fromkeys(hints))
        line += " (beside the service's data directory, or with FE_CI_RUNNER_TOKEN)"
    return line


def _read(http: httpx.Client, build_id: int, url: str, within_s: float) -> BuildReport | None:
    """The build's report; None while the service does not answer (it may be restarting), each
    ask bounded so that a service that accepts and never answers cannot outlast the wait."""
    try:
        got = http.get(f"/api/builds/{build_id}", timeout=max(1.0, min(READ_S, within_s)))
    except httpx.TransportError:
        return None
    if got.status_code != 200:
        raise fail(
            f"no verdict: the service at {url} answered {got.status_code} for build {build_id}",
            EXIT_NO_VERDICT,
        )
    try:
        return BuildReport.model_validate(got.json())
    except (ValueError, ValidationError) as exc:
        raise fail(
            f"no verdict: the service at {url} sent no build report: {exc}", EXIT_NO_VERDICT
        ) from exc


def wait(http: httpx.Client, build_id: int, url: str, timeout_s: float) -> BuildReport:
    """The finished build's report, or exit 3 once ``timeout_s`` has passed without one."""
    deadline = time.monotonic() + timeout_s
    shown_url = f"{url.rstrip('/')}/builds/{build_id}"
    last: BuildReport | None = None
    with progress.Waiting() as shown:
        while True:
            report = _read(http, build_id, url, deadline - time.monotonic())
            if report is not None and report.verdict != Verdict.pending:
                return report
            last = report or last
            if time.monotonic() >= deadline:
                break
            if report is None:
                shown.update(f"build {build_id}: the service at {url} does not answer; waiting")
            else:
                shown.update(state_line(report, url))
            time.sleep(max(0.0, min(POLL_S, deadline - time.monotonic())))
    state = state_line(last, url).split(": ", 1)[1] if last else "the service did not answer"
    raise fail(
        f"no verdict after {timeout_s:g} s (--timeout): {state}; the build goes on: {shown_url}",
        EXIT_NO_VERDICT,
    )
