"""Required checks: what gates a build, decided by one rule over its report.

The verdict stays honest (``incomplete`` while anything did not run); what gates is the user's
choice, ``fe-ci validate --require`` or the service's ``FE_CI_REQUIRE``. The vocabulary:

- ``all`` (the default): everything, so the gate follows the verdict;
- a stage (``build``, ``install``, ``probe``, ``determinism``, ``numerics``, ``refusal``): that
  stage on every job that ran it, and the error findings that stage produces (``probe``: the
  ledger and the comparison with the line's previous build); ``determinism`` and ``numerics``
  also need every subject this build has to have been covered;
- a cell (``sm_80``, ``sm_90``, ``sm_100``: a family on the host's cuDNN backend;
  ``sm_90-cudnn9.28.1``: on a backend of the matrix, ``core/cells.py``): that cell's GPU job,
  judged alone as GitHub's per-job context is (its stages and the subjects of its family);
- a subject (``sdpa_bwd``, ...): its determinism and numerics checks on every job, and the error
  findings about it; a build without the subject's knob passes it (``not_applicable``).

Each requirement is judged by the verdict rule on its slice of the report; the gate is
``failure`` when any required slice failed, errored or certified nothing (``inconclusive``),
``pending`` while one has still to run, ``neutral`` when one did not run, else ``success``.
The service (the report, GitHub's ``fe-ci`` context) and ``fe-ci validate`` (its exit code) both
call ``decide``, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable

from core import cells, coverage, repro
from core.subjects import FAMILIES, SUBJECTS
from core.text import shorten
from core.verdict import (
    NO_ANSWER,
    OPEN_JOBS,
    WORST_FIRST,
    Judgement,
    causes,
    finding_stage,
    judge,
    judge_job,
    no_runner,
)
from core.wire import (
    WHEEL_SOURCES,
    BuildReport,
    Conclusion,
    Gate,
    JobKind,
    JobOutcome,
    JobReport,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)

ALL = "all"
REASON_CHARS = 300
_PER_SUBJECT = (Stage.determinism, Stage.numerics)
_BY_VERDICT = {
    Verdict.pass_: Conclusion.success,
    Verdict.fail: Conclusion.failure,
    Verdict.error: Conclusion.failure,
    Verdict.inconclusive: Conclusion.failure,
    Verdict.incomplete: Conclusion.neutral,
    Verdict.cancelled: Conclusion.neutral,
    Verdict.pending: Conclusion.pending,
}
# ``fe-ci validate --require``'s exit status: 0 success, 1 failure, 2 neutral (or still to run).
EXIT_CODES = {
    Conclusion.success: 0,
    Conclusion.failure: 1,
    Conclusion.neutral: 2,
    Conclusion.pending: 2,
}
# Worst first: a failed requirement decides, then one still to run, then one that did not run.
_ORDER = (Conclusion.failure, Conclusion.pending, Conclusion.neutral, Conclusion.success)
_WORDS = {
    Conclusion.failure: "failed",
    Conclusion.pending: "still to run",
    Conclusion.neutral: "did not run",
    Conclusion.success: "passed",
}


def of_verdict(verdict: Verdict) -> Conclusion:
    """The gate under the default requirement (``all``): it follows the verdict."""
    return _BY_VERDICT[verdict]


def known() -> list[str]:
    """Every name ``--require`` accepts, in the order the help lists them."""
    return [ALL, *(s.value for s in Stage), *FAMILIES, *SUBJECTS]


def parse_require(value: str | Iterable[str] | None) -> list[str]:
    """The required checks from a comma-separated string or a list; empty means ``all``.

    Raises ``ValueError`` naming the unknown ones and every known one.
    """
    items = value.split(",") if isinstance(value, str) else list(value or ())
    names = list(dict.fromkeys(n.strip() for n in items if n.strip()))
    vocabulary = known()
    unknown = [n for n in names if n not in vocabulary and not _known_cell(n)]
    if unknown:
        raise ValueError(
            f"unknown required check(s) {', '.join(unknown)}; known: {', '.join(vocabulary)} "
            "(a stage, a GPU family, a cell such as sm_90-cudnn9.28.1, a subject, or all)"
        )
    if not names or ALL in names:
        return [ALL]
    return names


def decide(report: BuildReport, require: list[str]) -> Gate:
    """The gate of a judged report (its verdict, not_run and repro lines already set)."""
    require = require or [ALL]
    if ALL in require:
        conclusion = _BY_VERDICT[report.verdict]
        return Gate(require=[ALL], conclusion=conclusion, reason=report.verdict_reason)
    outcomes = [(name, *_requirement(report, name)) for name in require]
    conclusion = min((c for _, c, _ in outcomes), key=_ORDER.index)
    if conclusion == Conclusion.success:
        reason = "every required check passed"
    else:
        parts = [f"{n}: {shorten(why, 120)}" for n, c, why in outcomes if c == conclusion]
        reason = f"{_WORDS[conclusion]}: {'; '.join(parts)}"
    return Gate(require=require, conclusion=conclusion, reason=shorten(reason, REASON_CHARS))


def conclude(report: BuildReport, require: list[str]) -> BuildReport:
    """Judge ``report`` in place: repro lines, verdict and its reason, what did not run, the
    causes, the gate. The service and ``fe-ci validate`` both finish a report here."""
    repro.attach(report)
    judgement = judge(report)
    report.verdict, report.verdict_reason = judgement.verdict, judgement.reason
    report.not_run = judgement.not_run
    report.causes = causes(report)
    report.gate = decide(report, require)
    report.coverage = coverage.of_report(report)
    return report


def _of(judgement: Judgement) -> tuple[Conclusion, str]:
    return _BY_VERDICT[judgement.verdict], judgement.reason


def _requirement(report: BuildReport, name: str) -> tuple[Conclusion, str]:
    if name in SUBJECTS:
        return _subject(report, name)
    if name in FAMILIES or _known_cell(name):
        return _family(report, name)
    return _stage(report, Stage(name))


def awaits_reused(report: BuildReport, job: JobReport) -> str | None:
    """A finished GPU job whose reused refusal decisions are not made yet: why it is pending."""
    source = next((j for j in report.jobs if j.id == job.refusal_from), None)
    if job.refusal_from is None or source is None or source.status not in OPEN_JOBS:
        return None
    return f"waiting for the refusal decisions of the cpu job (job {source.id})"


def _known_cell(name: str) -> bool:
    """A cell of a family there is on a backend the matrix knows."""
    try:
        cell = cells.Cell.parse(name)
    except ValueError:
        return False
    return cell.family in FAMILIES and (cell.cudnn == cells.HOST or cells.is_known(cell.cudnn))


def _family(report: BuildReport, family: str) -> tuple[Conclusion, str]:
    """A cell's GPU job (``family``: a family's own name is its host-backend cell)."""
    jobs = [j for j in report.jobs if j.kind == JobKind.gpu and j.cell_name == family]
    if not jobs:
        if report.verdict == Verdict.pending and any(j.status in OPEN_JOBS for j in report.jobs):
            return Conclusion.pending, f"no {family} job yet"
        return Conclusion.neutral, f"no {family} job ({no_runner([family])})"
    judged = [
        (Conclusion.pending, why)
        if (why := awaits_reused(report, job))
        else _of(judge_job(report, job))
        for job in jobs
    ]
    return min(judged, key=lambda j: _ORDER.index(j[0]))


def _stage(report: BuildReport, stage: Stage) -> tuple[Conclusion, str]:
    if stage == Stage.build and report.source in WHEEL_SOURCES:
        return Conclusion.success, "a wheel needs no build"
    jobs: list[JobReport] = []
    for job in report.jobs:
        ran = [s for s in job.stages if s.name == stage]
        ended_in_error = job.outcome == JobOutcome.error
        if ran or job.status in OPEN_JOBS or ended_in_error:
            jobs.append(job.model_copy(update={"stages": ran}))
    errors = [
        f
        for f in report.findings
        if f.severity == Severity.error and finding_stage(f.kind) == stage
    ]
    caps = report.capabilities if stage in _PER_SUBJECT else {}
    if not jobs:
        return Conclusion.neutral, f"no job ran the {stage.value} stage"
    alone = report.model_copy(update={"jobs": jobs, "capabilities": caps, "findings": errors})
    return _of(judge(alone))


def _subject(report: BuildReport, name: str) -> tuple[Conclusion, str]:
    families = SUBJECTS[name].families
    errors = [f for f in report.findings if f.severity == Severity.error and f.subject == name]
    jobs: list[JobReport] = []
    for job in report.jobs:
        if job.kind == JobKind.gpu and job.family not in families:
            continue
        stages = [_only(s, name) for s in job.stages if s.name in _PER_SUBJECT]
        jobs.append(job.model_copy(update={"stages": [s for s in stages if s is not None]}))
    cap = report.capabilities.get(name)
    if cap is None and not errors:
        if any(j.status in OPEN_JOBS for j in report.jobs):
            return Conclusion.pending, "not probed yet"
        return Conclusion.neutral, "no probe result"
    caps = {name: cap} if cap is not None else {}
    alone = report.model_copy(update={"jobs": jobs, "capabilities": caps, "findings": errors})
    judged = judge(alone)
    if judged.verdict == Verdict.incomplete and cap is not None:
        if not (cap.importable and cap.present):  # nothing of it to check in this build
            return Conclusion.success, f"not applicable: this build has no '{cap.knob}'"
        if name not in {n.subject for n in judged.not_run}:
            return Conclusion.success, "its checks ran and passed"
    return _of(judged)


def _only(stage: StageResult, name: str) -> StageResult | None:
    """A determinism or numerics stage as one subject sees it: its own checks, or the stage as
    a whole where the stage did not run its subjects (skipped, or ended in error)."""
    mine = [c for c in stage.checks if c.subject == name]
    if mine:
        worst = _worst([c.status for c in mine])
        return stage.model_copy(update={"checks": mine, "status": worst, "reason": ""})
    if stage.status in NO_ANSWER:
        return stage
    return None


def _worst(statuses: list[Status]) -> Status:
    return min(statuses, key=WORST_FIRST.index)
