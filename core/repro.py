"""The one command that reproduces a failing or inconclusive check on a machine of its family.

Shared by the service (the build page, the JSON report, the JUnit XML and check-run annotations
read it from the report) and by ``fe-ci validate``'s local report, so every place shows one line.
"""

from __future__ import annotations

import shlex

from core.subjects import SUBJECTS
from core.verdict import NOT_PASSED
from core.wire import BuildReport, Check, Stage

_PER_SUBJECT = (Stage.determinism, Stage.numerics)


def target(report: BuildReport) -> str:
    """What ``fe-ci validate`` is given: the build's wheel, or the importable candidate."""
    if report.filename:
        return shlex.quote(report.filename)
    if report.commit:
        return shlex.quote(f"<wheel built from {report.commit[:12]}>")
    return "--preinstalled"


def repro_line(target: str, stage: Stage, check: Check) -> str:
    """``fe-ci validate TARGET --stages STAGE [--subjects S --config C]`` for one check."""
    parts = ["fe-ci", "validate", target, "--stages", stage.value]
    subject = check.subject
    if stage in _PER_SUBJECT and subject in SUBJECTS:
        parts += ["--subjects", subject]
        config = check.metrics.get("config_name")
        if isinstance(config, str) and config:
            parts += ["--config", shlex.quote(config)]
    return " ".join(parts)


def attach(report: BuildReport) -> BuildReport:
    """Give every failing or inconclusive check of ``report`` its repro line (in place)."""
    where = target(report)
    for job in report.jobs:
        for stage in job.stages:
            for check in stage.checks:
                if check.status in NOT_PASSED:
                    check.repro = repro_line(where, stage.name, check)
    return report
