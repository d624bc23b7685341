"""What ``fe-ci validate`` prints and writes: progress lines, the local build report, its text."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import typer

from core import repro
from core.verdict import judge
from core.wire import (
    BuildReport,
    BuildStatus,
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
from runner import stage_results

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


class Progress:
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


def local_report(
    result: stage_results.Result, *, wheel: Path | None, family: str | None, version: str | None
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
    report.not_run = judgement.not_run
    return repro.attach(report)


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
    for n in report.not_run:
        typer.echo(f"  not run {n.subject}: {n.reason}"[:300])
    refused = [r for r in report.refusal if r.status != Status.pass_]
    if report.refusal:
        typer.echo(f"  refusal rows: {len(report.refusal)}, not as expected: {len(refused)}")
    colour = {Verdict.pass_: typer.colors.GREEN, Verdict.fail: typer.colors.RED}.get(report.verdict)
    typer.secho(f"verdict: {report.verdict.value}: {report.verdict_reason}", fg=colour, bold=True)
