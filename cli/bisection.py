"""``fe-ci bisect GOOD BAD --repo PATH --stages probe``: the service's bisection, locally.

Builds GOOD and BAD with the real builder (``runner.build``), runs the selected stages on each
(``runner.pipeline.pipeline``), asks ``core.transitions`` what turned red, then searches the commits
of ``git rev-list --ancestry-path GOOD..BAD`` with ``core.bisection``: the same rules and the same
search as the service, without it. The steps' CPU stages fork warm parents
(``runner/isolation/zygotes.py``) kept for the whole search, as a long-running runner's are: a
step's probe imports its build, not torch and the DSL again.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from cli.common import fail, parse_stages, runner_settings
from core import commits, transitions
from core.bisection import DEFAULT_MAX_BUILDS, Answer, Outcome, Search
from core.text import plural
from core.wire import (
    BuildReport,
    BuildStatus,
    Capability,
    JobKind,
    JobOutcome,
    JobReport,
    JobState,
    Verdict,
)
from runner import build
from runner.agent import labels
from runner.isolation import zygotes
from runner.pipeline import localreport, pipeline, pipeline_options


class _Local:
    """Builds a commit and runs the stages on it, one work directory per commit."""

    def __init__(self, repo: Path, stages: str, work: Path) -> None:
        self.s = runner_settings()
        self.repo = repo
        self.stages = parse_stages(stages)
        self.work = work
        self.host = labels.host_labels(self.s.runner_labels)
        self.builds = 0
        self.zygotes: zygotes.Zygotes | None = None  # closed by ``close``
        if self.s.warm_workers:
            self.zygotes = zygotes.Zygotes(
                work / "zygotes", uid_range=self.s.uid_range(), hidden=self.s.private_dirs()
            )

    def close(self) -> None:
        if self.zygotes is not None:
            self.zygotes.close()

    def evaluate(self, sha: str, previous: dict[str, Capability] | None) -> BuildReport:
        self.builds += 1
        work = self.work / sha[:12]
        typer.echo(f"  ... {sha[:12]} building", err=True)
        built_stage, built = build.build_commit(self.s, str(self.repo), sha, work)
        if built is None:
            job = JobReport(
                kind=JobKind.build,
                status=JobState.finished,
                outcome=JobOutcome.ran,
                stages=[built_stage],
            )
            return BuildReport(
                source="commit", status=BuildStatus.finished, verdict=Verdict.fail, jobs=[job]
            )
        family = self.host.get("arch")
        opts = pipeline_options.Options.from_settings(
            self.s,
            stages=self.stages,
            work_dir=work / "run",
            family=family,
            gpu=self.host.get("gpu"),
            previous=previous,
            report_unselected=False,
            zygotes=self.zygotes,
        )
        result = pipeline.Pipeline(opts).run(built.wheel)
        report = localreport.local_report(result, wheel=built.wheel, family=family, version=None)
        report.source, report.commit = "commit", sha
        return report


def _say(answer: Answer, repo: Path, question: transitions.Question) -> None:
    typer.echo(f"\n{answer.describe(40)}")
    if answer.first_bad is not None:
        info = commits.commit_info(repo, answer.first_bad)
        typer.echo(f"  subject: {info.subject}\n  author:  {info.author}")
    pick = answer.first_bad or answer.candidates[-1]
    typer.echo(f"  reproduce: {question.repro(pick, str(repo))}")


def bisect(
    good: Annotated[str, typer.Argument(metavar="GOOD", show_default=False, hidden=True)],
    bad: Annotated[str, typer.Argument(metavar="BAD", show_default=False, hidden=True)],
    repo: Annotated[Path, typer.Option(metavar="PATH", help="the repository, a local path")] = Path(
        "."
    ),
    stages: Annotated[
        str,
        typer.Option(
            "--stages", metavar="STAGES", help="the deciding stages, comma-separated (probe)"
        ),
    ] = "probe",
    max_builds: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="builds between GOOD and BAD at most [default: FE_CI_BISECT_MAX_BUILDS, "
            f"{DEFAULT_MAX_BUILDS}]",
        ),
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option(metavar="DIR", help="keep the builds and logs here")
    ] = None,
) -> None:
    """Find the first commit after GOOD (green) up to BAD (red) where the stages turn red.

    GOOD and BAD are revisions of the repository at --repo (a sha, a branch, HEAD~3).

    \b
    Exit codes: 0 one commit named; 2 a range (skipped commits, or the cap);
    1 nothing the stages check turned red; 4 bad input.
    """
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise fail(f"{repo} is not a git repository")
    try:
        good_sha, bad_sha = commits.resolve_rev(repo, good), commits.resolve_rev(repo, bad)
        path = commits.ancestry_path(repo, good_sha, bad_sha)
    except commits.BuildFailure as exc:
        raise fail(exc.message) from exc
    if not path:
        raise fail(f"{bad} does not descend from {good}")
    tmp = Path(tempfile.mkdtemp(prefix="fe-ci-bisect-")) if work_dir is None else work_dir
    local = _Local(repo.resolve(), stages, tmp)
    try:
        typer.echo(
            f"bisecting {plural(len(path), 'commit')}, {good_sha[:12]}..{bad_sha[:12]}", err=True
        )
        base = local.evaluate(good_sha, None)
        questions = transitions.for_stages(
            transitions.detect(base, local.evaluate(bad_sha, base.capabilities)), local.stages
        )
        if not questions:
            raise fail(f"nothing that --stages {stages} checks turned red from GOOD to BAD", 1)
        question = questions[0]
        typer.echo(f"question: {question.summary()}", err=True)
        search = Search(tuple(path))
        cap = local.s.bisect_max_builds if max_builds is None else max_builds
        while (answer := search.done(cap)) is None:
            sha = search.next_commit()
            assert sha is not None
            report = local.evaluate(sha, base.capabilities)
            mark = transitions.judge(question, report)
            seen = transitions.observe(question, report) or "no answer"
            typer.echo(f"  {sha[:12]} {mark.value:<4} ({seen})")
            search = search.record(sha, mark)
    finally:
        local.close()
        if work_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    _say(answer, repo, question)
    typer.echo(f"  builds: {len(search.steps)} between GOOD and BAD, {local.builds} in all")
    raise typer.Exit(0 if answer.outcome == Outcome.found else 2)
