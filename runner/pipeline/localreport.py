"""What ``fe-ci validate`` writes and prints: the local build report, and its text, cause first
(the verdict, the gate, every cause with its repro line, every subject and stage that did not
run, skipped and not applicable alike), details after.
Progress while it runs is ``cli/progress.py``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import typer

from core import assemble as assembler
from core import cells, gate, notrun
from core.verdict import missed_stages
from core.wire import (
    BuildReport,
    BuildStatus,
    Conclusion,
    JobKind,
    JobOutcome,
    JobReport,
    JobState,
    Status,
    Verdict,
)
from runner.pipeline import stage_results


def local_report(
    result: stage_results.Result,
    *,
    wheel: Path | None,
    family: str | None,
    version: str | None,
    require: list[str] | None = None,
    cudnn: str | None = None,
) -> BuildReport:
    job = JobReport(
        id=None,
        kind=JobKind.gpu if family else JobKind.cpu,
        family=family,
        cell=cells.Cell(family, cudnn or cells.HOST).name if family else None,
        runner="local",
        status=JobState.finished,
        outcome=JobOutcome.ran,
        environment=result.environment,
        stages=[s.model_copy(update={"surface": []}) for s in result.stages],
    )
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest() if wheel else None
    head = BuildReport(
        source="wheel",
        version=result.version or version,
        sha256=sha,
        filename=wheel.name if wheel else None,
        status=BuildStatus.finished,
        verdict=Verdict.pending,
        negative_control=result.negative_control,
        jobs=[job],
    )
    reported = assembler.Reported()
    for stage in result.stages:
        reported.add_stage(stage, job_id=None, family=family)
    return assembler.assemble(head, reported, require or [gate.ALL])


_VERDICT_COLOURS = {Verdict.pass_: typer.colors.GREEN, Verdict.fail: typer.colors.RED}
_GATE_COLOURS = {
    Conclusion.success: typer.colors.GREEN,
    Conclusion.failure: typer.colors.RED,
    Conclusion.neutral: typer.colors.YELLOW,
}


def print_cause(report: BuildReport) -> None:
    """The verdict, the gate, every cause with its repro line, and what did not run."""
    colour = _VERDICT_COLOURS.get(report.verdict)
    typer.secho(f"verdict: {report.verdict.value}: {report.verdict_reason}", fg=colour, bold=True)
    g = report.gate
    if g is not None:
        typer.secho(
            f"gate ({', '.join(g.require)}): {g.conclusion.value}: {g.reason}",
            fg=_GATE_COLOURS.get(g.conclusion),
        )
    if report.causes:
        typer.echo(f"causes ({len(report.causes)}):")
    for c in report.causes:
        where = ", ".join(x for x in (c.cell or c.family, c.stage.value if c.stage else None) if x)
        typer.secho(f"  {c.status.upper():<12} {c.name}" + (f" ({where})" if where else ""))
        typer.echo(f"      {c.reason}")
        if c.repro:
            machine = f" on an {c.family} machine" if c.family else ""
            typer.echo(f"      reproduce{machine}: {c.repro}")
    subjects = notrun.lines(report.not_run)  # skipped and not applicable alike
    stages = missed_stages(report)
    if subjects or stages:
        typer.echo("did not run:")
    for line in subjects:
        typer.echo(f"  {line}"[:300])
    for m in stages:
        typer.echo(f"  {m.what}: {m.reason}"[:300])


def print_report(report: BuildReport) -> None:
    typer.echo(
        f"\nnvidia-cudnn-frontend {report.version or '?'}  ({report.filename or 'preinstalled'})"
    )
    print_cause(report)
    typer.echo("details:")
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
    if report.coverage.summary:
        typer.echo(f"  determinism surface: {report.coverage.summary}")
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
    g = f"; gate {report.gate.conclusion.value}" if report.gate else ""
    colour = _VERDICT_COLOURS.get(report.verdict)
    typer.secho(f"verdict: {report.verdict.value}{g}", fg=colour, bold=True)
