"""What one build leaves the next: the configs its determinism stage chose.

The service stores them when a GPU job finishes (``chosen_configs``) and sends them in the next
lease of the family; ``fe-ci validate --previous REPORT`` reads them from the report. Either way
the determinism stage gets the same list and keeps the entries that match its GPU and backend.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError

from core.comparable import ConfigKey
from core.verdict import ANSWERED
from core.wire import BuildReport, Check, Environment, RememberedConfig, Stage


def chosen(
    checks: Iterable[Check], *, family: str | None, environment: Environment, build_id: int | None
) -> list[RememberedConfig]:
    """The config each ``<subject>.deterministic`` check settled on, where its control varied.

    A config whose control never varied certified nothing: the next build escalates afresh.
    """
    if family is None:
        return []
    out: list[RememberedConfig] = []
    for check in checks:
        subject, what = check.subject, check.aspect
        if what != "deterministic" or check.status not in ANSWERED:  # the control was measured
            continue
        config = (check.metrics.get("config") or {}).get("name")
        varying = (check.metrics.get("control") or {}).get("varying") or 0
        if not isinstance(config, str) or not varying or check.metrics.get("negative_control"):
            continue
        key = ConfigKey.of(subject, family, environment.gpu, environment.cudnn_backend)
        try:  # a config the subject does not declare (any more) is not worth starting from
            entry = RememberedConfig(
                subject=key.subject,
                family=key.family,
                gpu=key.gpu,
                cudnn_backend=key.cudnn_backend,
                config=config,
                build_id=build_id,
            )
        except ValidationError:
            continue
        out.append(entry)
    return out


def from_report(report: BuildReport) -> list[RememberedConfig]:
    """Every config a report's GPU jobs chose (``fe-ci validate --previous``)."""
    out: list[RememberedConfig] = []
    for job in report.jobs:
        for stage in job.stages:
            if stage.name == Stage.determinism:
                out += chosen(
                    stage.checks,
                    family=job.family,
                    environment=job.environment,
                    build_id=report.id,
                )
    return out
