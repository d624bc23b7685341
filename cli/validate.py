"""``fe-ci validate``: the runner pipeline on one build, locally, without the service."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from cli import progress
from cli.common import (
    EXIT_FAILED,
    WHEEL_ARG,
    fail,
    parse_stages,
    runner_settings,
    stage_names,
    wheel_version,
)
from cli.configs import unknown_config
from core import cells, gate, history, remembered
from core.subjects import SUBJECTS
from core.verdict import EXIT_CODES
from core.wire import BuildReport, Capability, RememberedConfig, Stage, StageResult
from runner.agent import labels
from runner.config import RunnerSettings
from runner.pipeline import localreport, pipeline, pipeline_options


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
    return caps, remembered.from_report(report), report


def _parse_require(text: str | None) -> list[str] | None:
    if text is None:
        return None
    try:
        return gate.parse_require(text)
    except ValueError as exc:
        raise fail(str(exc)) from None


def _build_commit(
    s: RunnerSettings, repo: str, commit: str, work: Path
) -> tuple[Path, StageResult]:
    """The commit's wheel, built as a builder runner builds it, and the build stage's result."""
    from runner import build

    with progress.StageProgress() as shown:
        shown.started(Stage.build)
        result, built = build.build_commit(s, repo, commit, work)
        shown.finished(result)
    if built is None:
        raise fail(f"the build failed: {result.reason}", EXIT_FAILED)
    return built.wheel, result


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
            help=f"comma-separated, from: {stage_names()} (default: all of them; build is "
            "--commit's)",
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
    require: Annotated[
        str | None,
        typer.Option(
            "--require",
            metavar="CHECKS",
            help="the checks that gate (exit by the gate, not the verdict), comma-separated: "
            "a stage (probe, refusal, ...), a family's GPU job (sm_90, ...), a subject, or all",
        ),
    ] = None,
    cudnn: Annotated[
        str | None,
        typer.Option(
            "--cudnn",
            metavar="VERSION",
            help="run on this cuDNN backend (e.g. 9.28.1), installed as a layer, not the host's",
        ),
    ] = None,
) -> None:
    """Run the runner pipeline on WHEEL (or the preinstalled candidate), locally, no service.

    \b
    Exit codes: 0 pass; 1 fail or error; 2 inconclusive or incomplete;
    with --require, by the gate: 0 success, 1 failure, 2 neutral (a required check did not run);
    4 bad input (not a wheel, no such file, an unknown stage, config or required check, a bad
    FE_CI_ setting).
    """
    s = runner_settings()
    if wheel is None and commit is None and not preinstalled:
        raise fail("give a WHEEL, --commit SHA, or --preinstalled for the importable candidate")
    selected = parse_stages(stages)
    required = _parse_require(require)
    chosen_subjects = _parse_subjects(subjects)
    backend = _parse_cudnn(cudnn)
    if config is not None and (why := unknown_config(config, chosen_subjects or list(SUBJECTS))):
        raise fail(why)
    prev, remembered, prev_report = _load_previous(previous) if previous else (None, [], None)
    version = wheel_version(wheel) if wheel is not None else None
    tmp = Path(tempfile.mkdtemp(prefix="fe-ci-validate-")) if work_dir is None else work_dir
    built: StageResult | None = None
    try:  # bad input found from here on leaves no temp dir behind
        if commit is not None:
            wheel, built = _build_commit(s, repo, commit, tmp / "build")
            version = wheel_version(wheel)
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
        previous_surface=[k.model_dump() for k in prev_report.surface] if prev_report else None,
        remembered=remembered,
        subjects=chosen_subjects,
        pin_config=config,
        comparison=history.comparison_points(prev_report, _cell(family, backend))
        if prev_report
        else [],
        cudnn=backend,
    )
    where = f"{gpu.get('gpu')} ({family})" if family else "no GPU"
    typer.echo(
        f"validating {wheel.name if wheel else 'the preinstalled candidate'} on {where}", err=True
    )
    try:  # the report hashes the wheel, which a commit build left in the temp dir
        with progress.StageProgress() as shown:
            result = pipeline.Pipeline(opts, shown).run(wheel)
        if built is not None:  # the wheel came from the builder: its stage belongs to the report
            result.stages.insert(0, built)
        report = localreport.local_report(
            result,
            wheel=wheel,
            family=family,
            version=version,
            require=required,
            cudnn=backend,
        )
    finally:
        if work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    if prev_report is not None:  # deterministic bits and cost against the earlier report
        report.history, changed = history.compare_reports(report, prev_report, s.cost_factor)
        report.findings += changed
    if commit is not None:
        report.source, report.repo, report.commit = "commit", repo, commit
    if prev_report is not None or commit is not None:  # judged again with what changed
        gate.conclude(report, required or [gate.ALL])
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(report.model_dump_json(indent=2))
    localreport.print_report(report)
    if required is not None and report.gate is not None:
        raise typer.Exit(gate.EXIT_CODES[report.gate.conclusion])
    raise typer.Exit(EXIT_CODES[report.verdict])


def _cell(family: str | None, backend: str | None) -> str | None:
    """The cell this run measures (a report of a matrix is compared cell by cell)."""
    return cells.Cell(family, backend or cells.HOST).name if family else None


def _parse_cudnn(value: str | None) -> str | None:
    """``--cudnn``: a known backend version (``host``: the host's own, as without it)."""
    if value is None or value.strip() == cells.HOST:
        return None
    try:
        cells.parse_matrix(f"{cells.CUDNN}={value.strip()}")
    except ValueError as exc:
        raise fail(str(exc)) from exc
    return value.strip()
