"""Red transitions between two builds, and the one check that decides each, as a list of rules.

A rule looks at a good build's report and a later bad one and names the questions that turned red
(``detect``); for each question it says which stages answer it (the only ones a bisection step
runs), and reads the answer from any build's report (``observe``): the value the good build had
means ``good``, any other value ``bad``, no value (the deciding stage did not run, or ended
``error``) ``skip``. Used by the service's bisections and by ``fe-ci bisect``; a new kind of red
is one more entry in ``RULES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import BaseModel

from core.bisection import Mark
from core.kinds import FindingKind
from core.verdict import NO_ANSWER
from core.wire import BuildReport, JobKind, RefusalReport, Stage, StageResult, Status

PRESENT, ABSENT = "present", "absent"


class Question(BaseModel):
    """What a bisection asks of each commit (stored with the bisection as JSON)."""

    rule: str
    subject: str | None = None
    family: str | None = None  # the GPU family whose job decides; None: the CPU job
    check: str  # the finding kind, check name or refusal row that turned red
    good: str  # what the good build showed
    bad: str  # what the bad build showed
    stages: list[Stage]

    def deciding_subjects(self) -> list[str] | None:
        """The subjects a step's determinism stage runs (None: no determinism stage)."""
        return [self.subject] if Stage.determinism in self.stages and self.subject else None

    def summary(self) -> str:
        where = f" on {self.family}" if self.family else ""
        return f"{self.check}{where}: {self.good} on the good build, {self.bad} on the bad one"

    def repro(self, commit: str, repo: str | None = None) -> str:
        """The one command that answers the question for ``commit`` on a machine of its family."""
        stages = ",".join(s.value for s in self.stages if s not in (Stage.build, Stage.install))
        line = f"fe-ci validate --commit {commit}"
        if repo:
            line += f" --repo {repo}"
        line += f" --stages {stages}"
        if Stage.determinism in self.stages and self.subject:
            line += f" --subjects {self.subject}"
        return line


@dataclass(frozen=True)
class Rule:
    name: str
    detect: Callable[[BuildReport, BuildReport], list[Question]]
    observe: Callable[[Question, BuildReport], str | None]


def _stages(report: BuildReport, name: Stage, family: str | None) -> Iterator[StageResult]:
    for job in report.jobs:
        if job.kind == JobKind.build or (family is not None and job.family != family):
            continue
        yield from (s for s in job.stages if s.name == name)


def _answered(report: BuildReport, name: Stage, family: str | None) -> bool:
    """The deciding stage ran on some job and ended with an answer."""
    # a stage that answered nothing (``NO_ANSWER``) leaves the commit skipped
    return any(s.status not in NO_ANSWER for s in _stages(report, name, family))


# ------------------------------------------------------------------ findings that appear


def _finding_rule(kind: str, stage: Stage) -> Rule:
    """A finding of ``kind`` on a subject that the good build did not have."""

    def family_of(report: BuildReport, subject: str | None) -> str | None:
        if stage != Stage.determinism:
            return None
        for d in report.drift:
            if d.subject == subject and d.family:
                return d.family
        return next((j.family for j in report.jobs if j.kind == JobKind.gpu), None)

    def detect(good: BuildReport, bad: BuildReport) -> list[Question]:
        before = {f.subject for f in good.findings if f.kind == kind}
        out: list[Question] = []
        for subject in dict.fromkeys(f.subject for f in bad.findings if f.kind == kind):
            if subject in before:
                continue
            out.append(
                Question(
                    rule=kind,
                    subject=subject,
                    family=family_of(bad, subject),
                    check=f"{kind}:{subject}" if subject else kind,
                    good=ABSENT,
                    bad=PRESENT,
                    stages=[Stage.install, Stage.probe]
                    if stage == Stage.probe
                    else [Stage.install, Stage.probe, stage],
                )
            )
        return out

    def observe(q: Question, report: BuildReport) -> str | None:
        if not _answered(report, stage, q.family):
            return None
        found = any(f.kind == kind and f.subject == q.subject for f in report.findings)
        return PRESENT if found else ABSENT

    return Rule(name=kind, detect=detect, observe=observe)


# ------------------------------------------------------------------ a determinism check


def _check_status(report: BuildReport, name: str, family: str | None) -> Status | None:
    for stage in _stages(report, Stage.determinism, family):
        for check in stage.checks:
            if check.name == name:
                return check.status
    return None


def _detect_determinism(good: BuildReport, bad: BuildReport) -> list[Question]:
    out: list[Question] = []
    for job in bad.jobs:
        if job.kind != JobKind.gpu:
            continue
        for stage in (s for s in job.stages if s.name == Stage.determinism):
            for check in stage.checks:
                was = _check_status(good, check.name, job.family)
                if was == Status.pass_ and check.status == Status.fail:
                    out.append(
                        Question(
                            rule="determinism_check",
                            subject=check.subject,
                            family=job.family,
                            check=check.name,
                            good=Status.pass_.value,
                            bad=Status.fail.value,
                            stages=[Stage.install, Stage.probe, Stage.determinism],
                        )
                    )
    return out


def _observe_determinism(q: Question, report: BuildReport) -> str | None:
    status = _check_status(report, q.check, q.family)
    # inconclusive certifies nothing, error answers nothing: neither says good or bad
    return status.value if status in (Status.pass_, Status.fail) else None


# ------------------------------------------------------------------ a refusal row


def _row_key(row: RefusalReport) -> str:
    flags = [n for n in ("scale_bias", "fc1_bias", "unit_scale") if getattr(row, n)]
    return "/".join([row.activation, row.request, *flags])


def _rows(report: BuildReport) -> dict[str, RefusalReport]:
    return {_row_key(r): r for r in report.refusal}


def _detect_refusal(good: BuildReport, bad: BuildReport) -> list[Question]:
    before = _rows(good)
    out: list[Question] = []
    for key, row in _rows(bad).items():
        was = before.get(key)
        if was is None or was.observed == row.observed or row.status == Status.pass_:
            continue
        out.append(
            Question(
                rule="refusal_row",
                subject=row.activation,
                check=f"refusal:{key}",
                good=was.observed,
                bad=row.observed,
                stages=[Stage.install, Stage.probe, Stage.refusal],
            )
        )
    return out


def _observe_refusal(q: Question, report: BuildReport) -> str | None:
    if not _answered(report, Stage.refusal, None):
        return None
    row = _rows(report).get(q.check.removeprefix("refusal:"))
    return row.observed if row is not None else None


# Cheapest first: the first question a transition raises is the one a bisection asks.
RULES: tuple[Rule, ...] = (
    _finding_rule(FindingKind.feature_regression, Stage.probe),
    Rule("refusal_row", _detect_refusal, _observe_refusal),
    Rule("determinism_check", _detect_determinism, _observe_determinism),
    _finding_rule(FindingKind.deterministic_bits_changed, Stage.determinism),
    _finding_rule(FindingKind.determinism_cost_regressed, Stage.determinism),
)
_BY_NAME = {r.name: r for r in RULES}


def detect(good: BuildReport, bad: BuildReport) -> list[Question]:
    """Every question that turned red from ``good`` to ``bad``, cheapest rule first."""
    return [q for rule in RULES for q in rule.detect(good, bad)]


def observe(question: Question, report: BuildReport) -> str | None:
    """What ``report`` shows for the question; None when its deciding stage answered nothing."""
    return _BY_NAME[question.rule].observe(question, report)


def judge(question: Question, report: BuildReport) -> Mark:
    """good, bad or skip for one step's build."""
    value = observe(question, report)
    if value is None:
        return Mark.skip
    return Mark.good if value == question.good else Mark.bad


def for_stages(questions: list[Question], stages: list[Stage]) -> list[Question]:
    """The questions that ``stages`` (what ``fe-ci bisect --stages`` runs) can answer."""
    return [q for q in questions if set(q.stages) - {Stage.install} <= set(stages) | {Stage.probe}]
