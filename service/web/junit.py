"""JUnit XML from a build report, so other CI tools can read the results.

One ``testsuite`` per job and stage, one ``testcase`` per check (a stage without checks is one
testcase itself, so a failed install shows), one suite of skipped testcases for the subjects whose
determinism did not run (each with its reason, worded as on the dashboard), and one suite for the
build's findings of severity ``error``. A job that has not finished gets a suite of one skipped
testcase that says so (a pending build is never an empty, green-looking file). Times are real: a
suite's is its stage's ``duration_s``, shared evenly by its testcases. Statuses map: ``fail`` ->
``<failure>``; ``error``, ``timeout``, ``crashed`` and ``inconclusive`` -> ``<error type=...>``
(commit statuses call inconclusive an error too); ``skipped`` and ``not_applicable`` ->
``<skipped>`` with the reason.
A failing or inconclusive check's text ends with the command that reproduces it.

Whatever a report holds, the XML is well formed: every attribute and text passes ``_clean`` on
the way out, which shows a character XML 1.0 cannot carry (a control character, a lone
surrogate) as U+FFFD and cuts a name past ``NAME_CHARS`` or a text past ``TEXT_CHARS``.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from core import notrun
from core.verdict import ERRORED, NOT_RUN
from core.wire import BuildReport, Check, JobReport, JobState, Severity, StageResult, Status

_ERRORS = ERRORED | {Status.inconclusive}  # commit statuses call inconclusive an error too
# Characters XML 1.0 cannot carry (ANSI escapes in a log tail, for one; a lone surrogate).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
NAME_CHARS = 1024  # an attribute: a check's name, a classname, a message
TEXT_CHARS = 65536  # an element's text: a detail, a log tail
CUT = "\u2026[cut]"


def _text(value: str, limit: int = TEXT_CHARS) -> str:
    """``value`` as XML 1.0 can carry it: illegal characters shown as U+FFFD, cut at ``limit``."""
    if len(value) > limit:
        value = value[: limit - len(CUT)] + CUT
    return _NOT_XML.sub("\ufffd", value)


def _clean(root: ET.Element) -> None:
    """Every attribute and text of the tree made safe, whichever field it came from."""
    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, _text(value, NAME_CHARS))
        if element.text:
            element.text = _text(element.text)


def _case(
    suite: ET.Element,
    classname: str,
    name: str,
    status: Status,
    detail: str,
    seconds: float = 0.0,
) -> str:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}")
    message = detail or status.value
    if status == Status.fail:
        ET.SubElement(case, "failure", message=message, type="fail").text = detail
    elif status in _ERRORS:
        ET.SubElement(case, "error", message=message, type=status.value).text = detail
    elif status in NOT_RUN:  # in the words of the verdict line and the CLI
        ET.SubElement(case, "skipped", message=notrun.said(status, detail))
    return status.value


def _with_repro(check: Check, job: JobReport) -> str:
    if not check.repro:
        return check.detail
    where = f" on an {job.family} machine" if job.family else ""
    return f"{check.detail}\nreproduce{where}: {check.repro}"


def _job_name(job: JobReport) -> str:
    return f"{job.kind.value}-{job.family}" if job.family else job.kind.value


def _stage_suite(root: ET.Element, build: BuildReport, job: JobReport, stage: StageResult) -> None:
    classname = f"fe_ci.build{build.id}.{_job_name(job)}.{stage.name.value}"
    name = f"{_job_name(job)}/{stage.name.value}"
    seconds = stage.duration_s or 0.0  # a stored row may hold none
    suite = ET.SubElement(root, "testsuite", name=name, time=f"{seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("job_id", str(job.id)),
        ("runner", job.runner or ""),
        ("stage_status", stage.status.value),
        ("stage_reason", stage.reason),
    ):
        ET.SubElement(props, "property", name=key, value=value)
    ET.SubElement(props, "property", name="verdict", value=build.verdict.value)
    cases = stage.checks or []
    share = seconds / max(1, len(cases))
    outcomes = [
        _case(suite, classname, c.name, c.status, _with_repro(c, job), share) for c in cases
    ]
    if not cases:
        outcomes.append(
            _case(suite, classname, stage.name.value, stage.status, stage.reason, share)
        )
    _count(suite, outcomes)
    if stage.log_tail:
        ET.SubElement(suite, "system-out").text = stage.log_tail


def _count(suite: ET.Element, outcomes: list[str]) -> None:
    suite.set("tests", str(len(outcomes)))
    suite.set("failures", str(sum(o == Status.fail for o in outcomes)))
    suite.set("errors", str(sum(o in _ERRORS for o in outcomes)))
    suite.set("skipped", str(sum(o in NOT_RUN for o in outcomes)))


_UNDERWAY = {
    JobState.waiting: "waiting for the wheel",
    JobState.queued: "queued",
    JobState.leased: "running",
}


def _pending_suite(root: ET.Element, build: BuildReport, job: JobReport) -> None:
    """A job still underway: one skipped testcase that says so."""
    suite = ET.SubElement(root, "testsuite", name=f"{_job_name(job)}/pending", time="0")
    where = f"an {job.family} runner" if job.family else "a runner"
    state = _UNDERWAY.get(job.status, job.status.value)
    if job.status == JobState.queued:
        state = f"queued, waiting for {where}"
    text = f"pending: the job is {state}; {len(job.stages)} stages reported so far"
    classname = f"fe_ci.build{build.id}.{_job_name(job)}"
    _count(suite, [_case(suite, classname, "pending", Status.skipped, text)])


def _coverage_suite(root: ET.Element, build: BuildReport) -> None:
    """The determinism surface: a case per knob, passed where a subject exercised it, skipped
    (with how it was covered, or why not) elsewhere; the summary line is a property."""
    suite = ET.SubElement(root, "testsuite", name="determinism surface", time="0")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="coverage", value=build.coverage.summary)
    classname = f"fe_ci.build{build.id}.surface"
    outcomes = []
    for row in build.coverage.rows:
        name = f"{row.entry_point}.{row.knob}"
        if row.status == "exercised":
            outcomes.append(_case(suite, classname, name, Status.pass_, row.why))
        else:
            why = f"{row.status.replace('_', '-')}: {row.why}"
            outcomes.append(_case(suite, classname, name, Status.skipped, why))
    _count(suite, outcomes)


def junit_xml(build: BuildReport) -> bytes:
    title = f"fe-ci build {build.id} {build.version or ''}: {build.verdict.value}"
    root = ET.Element("testsuites", name=title)
    for job in build.jobs:
        for stage in job.stages:
            _stage_suite(root, build, job, stage)
        if job.status in _UNDERWAY:
            _pending_suite(root, build, job)
    if build.not_run:
        suite = ET.SubElement(root, "testsuite", name="subjects not run", time="0")
        classname = f"fe_ci.build{build.id}.determinism"
        outcomes = [
            _case(suite, classname, f"{n.subject}.determinism", n.status, n.reason)
            for n in build.not_run
        ]
        _count(suite, outcomes)
    if build.coverage.rows:
        _coverage_suite(root, build)
    errors = [f for f in build.findings if f.severity == Severity.error]
    if errors:
        suite = ET.SubElement(root, "testsuite", name="findings", time="0")
        outcomes = [
            _case(
                suite,
                f"fe_ci.build{build.id}.findings",
                f"{f.kind}.{f.subject or 'build'}",
                Status.fail,
                f.message,
            )
            for f in errors
        ]
        _count(suite, outcomes)
    suites = root.findall("testsuite")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.set("time", f"{sum(float(s.get('time', '0')) for s in suites):.3f}")
    _clean(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
