"""``fe-ci``: serve, runner, submit, validate.

The service is imported only inside ``serve``, so a runner host needs none of its dependencies.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Annotated

import httpx
import typer

from runner import envs, labels, pipeline
from runner.config import RunnerSettings
from runner.verdict import EXIT_CODES, judge
from runner.wire import (
    STAGE_ORDER,
    BuildReport,
    BuildStatus,
    Capability,
    DriftReport,
    JobKind,
    JobReport,
    JobState,
    RefusalReport,
    Stage,
    StageResult,
    Status,
    Verdict,
)

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)

_MARK = {
    Status.pass_: "ok ",
    Status.fail: "FAIL",
    Status.inconclusive: "??? ",
    Status.error: "ERR ",
    Status.timeout: "TIME",
    Status.crashed: "CRSH",
    Status.skipped: "skip",
    Status.not_applicable: "n/a ",
}


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
    )


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


# ------------------------------------------------------------------------------------- serve


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8080,
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Run the service (API, dashboard, runner protocol)."""
    import uvicorn

    from service.app import create_app
    from service.config import Settings

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
    uvicorn.run(application, host=host, port=port, log_level=log_level, access_log=False)


# ------------------------------------------------------------------------------------ runner


@app.command()
def runner(
    once: Annotated[bool, typer.Option(help="take at most one job, then exit")] = False,
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Run a runner: claim jobs from the service at FE_CI_URL and run them."""
    from runner.agent import Agent

    setup_logging(log_level)
    agent = Agent(RunnerSettings(), once=once)
    agent.install_signal_handlers()
    raise typer.Exit(agent.run())


# ------------------------------------------------------------------------------------ submit


@app.command()
def submit(
    wheel: Annotated[Path | None, typer.Argument(help="a nvidia-cudnn-frontend wheel")] = None,
    commit: Annotated[str | None, typer.Option(help="a 40-hex commit of the repository")] = None,
    wait: Annotated[bool, typer.Option(help="wait for the verdict; exit as validate does")] = False,
) -> None:
    """Submit a wheel or a commit to a running service."""
    s = RunnerSettings()
    token = s.token("submit_token")
    if not token:
        raise fail("set FE_CI_SUBMIT_TOKEN (or run beside the service's data directory)")
    if (wheel is None) == (commit is None):
        raise fail("give a WHEEL or --commit SHA (one of them)")
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
            raise fail(f"cannot reach the service at {s.url}: {exc}") from exc
        if resp.status_code != 202:
            err = resp.json().get("error", {}) if resp.content else {}
            raise fail(f"{resp.status_code} {err.get('code')}: {err.get('message', resp.text)}", 1)
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


# ---------------------------------------------------------------------------------- validate


class _Progress:
    def __init__(self) -> None:
        self.t0 = 0.0

    def started(self, stage: Stage) -> None:
        self.t0 = time.monotonic()
        typer.echo(f"  ... {stage.value:<12} running", err=True)

    def finished(self, result: StageResult) -> None:
        mark = _MARK.get(result.status, "?")
        colour = {
            Status.pass_: typer.colors.GREEN,
            Status.fail: typer.colors.RED,
            Status.error: typer.colors.RED,
            Status.timeout: typer.colors.RED,
            Status.crashed: typer.colors.RED,
            Status.inconclusive: typer.colors.YELLOW,
        }.get(result.status)
        line = f"  [{mark}] {result.name.value:<12} {result.status.value:<15} {result.reason}"
        typer.secho(line[:200], fg=colour, err=True)


def _parse_stages(text: str | None) -> list[Stage]:
    if not text:
        return [s for s in STAGE_ORDER if s != Stage.build]
    out: list[Stage] = []
    for part in text.split(","):
        name = part.strip()
        try:
            out.append(Stage(name))
        except ValueError:
            known = ", ".join(s.value for s in Stage)
            raise fail(f"unknown stage {name!r}; stages: {known}") from None
    return out


def _load_previous(path: Path) -> dict[str, Capability]:
    try:
        data = json.loads(path.read_text())
        return {k: Capability.model_validate(v) for k, v in data["capabilities"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"--previous {path}: not a build report ({exc})") from exc


def local_report(
    result: pipeline.Result, *, wheel: Path | None, family: str | None, version: str | None
) -> BuildReport:
    job = JobReport(
        id=None,
        kind=JobKind.gpu if family else JobKind.cpu,
        family=family,
        runner="local",
        status=JobState.finished,
        environment=result.environment,
        stages=result.stages,
    )
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel else None
    report = BuildReport(
        source="wheel",
        version=result.version or version,
        sha256=sha,
        filename=wheel.name if wheel else None,
        status=BuildStatus.finished,
        verdict=Verdict.pending,
        negative_control=result.negative_control,
        capabilities=result.capabilities,
        findings=result.findings,
        jobs=[job],
        drift=[
            DriftReport.model_validate({**d.model_dump(), "family": family})
            for s in result.stages
            for d in s.drift
        ],
        refusal=[
            RefusalReport.model_validate(r.model_dump()) for s in result.stages for r in s.refusal
        ],
    )
    judgement = judge(report)
    report.verdict, report.verdict_reason = judgement.verdict, judgement.reason
    return report


def print_report(report: BuildReport) -> None:
    typer.echo(
        f"\nnvidia-cudnn-frontend {report.version or '?'}  ({report.filename or 'preinstalled'})"
    )
    if report.capabilities:
        typer.echo("  capabilities:")
        for name, cap in report.capabilities.items():
            if not cap.importable:
                state = f"not importable ({cap.error or 'unknown'})"
            elif cap.present:
                state = f"{cap.knob} present, default {cap.default} (via {cap.method})"
            else:
                state = f"no {cap.knob!r}"
            typer.echo(f"    {name:<22} {state}"[:200])
    for f in report.findings:
        typer.echo(f"  {f.severity.value:<7} {f.kind}: {f.message}"[:300])
    for d in report.drift:
        typer.echo(
            f"  drift {d.subject}.{d.output} {d.arm}: {d.differing}/{max(d.runs - 1, 0)} differ, "
            f"{d.distinct} distinct, max|d| {d.max_abs_diff}, luck {d.luck_probability}"
        )
    refused = [r for r in report.refusal if r.status != Status.pass_]
    if report.refusal:
        typer.echo(f"  refusal rows: {len(report.refusal)}, not as expected: {len(refused)}")
    colour = {Verdict.pass_: typer.colors.GREEN, Verdict.fail: typer.colors.RED}.get(report.verdict)
    typer.secho(f"verdict: {report.verdict.value}: {report.verdict_reason}", fg=colour, bold=True)


@app.command()
def validate(
    wheel: Annotated[Path | None, typer.Argument(help="the wheel to validate")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    stages: Annotated[
        str | None, typer.Option(help="comma-separated: probe,determinism,numerics,refusal")
    ] = None,
    previous: Annotated[
        Path | None, typer.Option(help="an earlier report of the line (feature regression)")
    ] = None,
    preinstalled: Annotated[
        bool, typer.Option(help="the candidate is already importable here: no install stage")
    ] = False,
    python: Annotated[
        Path | None, typer.Option(help="with --preinstalled: the Python that has the candidate")
    ] = None,
    negative_control: Annotated[
        bool, typer.Option(help="diagnostic: run the deterministic arm with the knob off")
    ] = False,
    work_dir: Annotated[
        Path | None, typer.Option(help="keep the environment and logs here")
    ] = None,
) -> None:
    """Run the runner pipeline on one build, locally, without a service."""
    s = RunnerSettings()
    if wheel is None and not preinstalled:
        raise fail("give a WHEEL, or --preinstalled to validate the importable candidate")
    selected = _parse_stages(stages)
    version = None
    if wheel is not None:
        if not wheel.is_file():
            raise fail(f"no such file: {wheel}")
        try:
            meta = envs.read_wheel_metadata(wheel)
        except (OSError, ValueError, StopIteration, KeyError, zipfile.BadZipFile) as exc:
            raise fail(f"{wheel} is not a readable wheel: {exc}") from exc
        version = meta.version
    prev = _load_previous(previous) if previous else None
    gpu = labels.host_labels(s.runner_labels)
    family = gpu.get("arch")
    tmp = Path(tempfile.mkdtemp(prefix="fe-ci-validate-")) if work_dir is None else work_dir
    opts = pipeline.Options(
        stages=selected,
        work_dir=tmp,
        preinstalled=preinstalled,
        candidate_python=python,
        index_url=s.index_url,
        wheelhouse=s.wheelhouse,
        stage_timeout_s=s.stage_timeout_s,
        install_timeout_s=s.install_timeout_s,
        repeats=s.repeats,
        max_repeats=s.max_repeats,
        luck_target=s.luck_target,
        control_share=s.control_share,
        negative_control=negative_control,
        family=family,
        gpu=gpu.get("gpu"),
        previous=prev,
        compile_cache_dir=Path(s.cache_dir) / "compile-cache",
    )
    where = f"{gpu.get('gpu')} ({family})" if family else "no GPU"
    typer.echo(
        f"validating {wheel.name if wheel else 'the preinstalled candidate'} on {where}", err=True
    )
    pipe = pipeline.Pipeline(opts, _Progress())
    try:
        result = pipe.run(wheel)
    finally:
        if work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    report = local_report(result, wheel=wheel, family=family, version=version)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(report.model_dump_json(indent=2))
    print_report(report)
    raise typer.Exit(EXIT_CODES[report.verdict])


def main() -> None:
    app()


if __name__ == "__main__":
    main()
