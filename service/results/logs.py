"""Each stage's runner log: stored per job as the runner sent it, every token the service knows
redacted on the way in, served as text (``GET /api/builds/{id}/logs``) and on the build page.

What is served is text, never a terminal's commands: each control character but newline and tab
is shown as a visible escape (``core.text.visible``), and a log line that begins like a heading
(``==>``) has its first character escaped (``\x3d=>``), so only the service's own lines head a
stage. Redacted before storage: the submit, registration and admin tokens, the webhook and
notification secrets, GitHub's credentials, the lease token and the posting runner's own token
(runner tokens are stored hashed, so the one at hand is the only one the service can see).

The runner sends the end of each stage's log with its result
(``core.wire.protocol.StagePost.log``, at most ``LOG_MAX_CHARS``); a stage posted without one (an
older runner) shows its failure tail (``StageResult.log_tail``) instead. Logs belong to their
job's attempt: an abandoned attempt's are removed with its other results
(``queue._clear_attempt``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.redaction import kept, redact, redact_text
from core.text import visible
from core.wire import LOG_MAX_CHARS, STAGE_ORDER, BuildReport, Stage, StageResult
from service.config import Settings
from service.models import Job, StageLog

PAGE_CHARS = 16 * 1024  # the build page shows each log's end; the whole one is a link away


def secret_values(settings: Settings, *more: str | None) -> tuple[str, ...]:
    """Every secret the service holds (and ``more``: the caller's lease token and its own
    runner token, which the service keeps only hashed), as ``core.redaction.kept`` keeps them."""
    return kept(
        [
            settings.submit_token,
            settings.runner_token,
            settings.admin_token,
            settings.webhook_secret,
            settings.github_token,
            settings.notify_secret,
            *(settings.github_app_private_key or "").splitlines(),
            *more,
        ]
    )


def redact_result(result: StageResult, secrets: tuple[str, ...]) -> StageResult:
    """The stage's result with every secret in its texts (reasons, details, metrics, messages,
    the failure tail) redacted; the same object when none holds one (the common case, checked
    on its JSON once)."""
    dumped = result.model_dump_json()
    if not any(value in dumped for value in secrets):
        return result
    return StageResult.model_validate(redact(result.model_dump(mode="json"), secrets))


def store(
    session: Session, job: Job, stage: Stage, text: str | None, secrets: tuple[str, ...]
) -> None:
    """Keep a stage's log (once: a retried post keeps the first)."""
    if not text:
        return
    found = session.scalars(
        select(StageLog.id).where(StageLog.job_id == job.id, StageLog.stage == stage.value)
    ).first()
    if found is not None:
        return
    clean = redact_text(text[-LOG_MAX_CHARS:], secrets)
    session.add(StageLog(build_id=job.build_id, job_id=job.id, stage=stage.value, text=clean))


def of_build(session: Session, build_id: int) -> dict[tuple[int, str], str]:
    """Every stored log of a build by (job id, stage)."""
    rows = session.execute(
        select(StageLog.job_id, StageLog.stage, StageLog.text).where(StageLog.build_id == build_id)
    )
    return {(job_id or 0, stage): text for job_id, stage, text in rows}


_HEADING_LIKE = re.compile(r"^==>", re.MULTILINE)


def served(text: str) -> str:
    """A stored log as it is served: controls as visible escapes, no line a heading."""
    return _HEADING_LIKE.sub(r"\\x3d=>", visible(text))


@dataclass(frozen=True)
class StageLogView:
    job_id: int
    job: str  # "cpu job 11", "gpu job 12 (sm_90)"
    stage: str
    status: str
    text: str  # the whole stored log (or the failure tail of a stage posted without one), served
    whole: bool  # a log the runner sent, not only the failure tail

    @property
    def tail(self) -> str:
        return self.text[-PAGE_CHARS:]

    @property
    def cut(self) -> bool:
        return len(self.text) > PAGE_CHARS


def views(report: BuildReport, stored: dict[tuple[int, str], str]) -> list[StageLogView]:
    """One entry per stage of every job, in the report's order (stages without any log too)."""
    out = []
    for job in report.jobs:
        label = f"{job.kind.value} job {job.id}" + (f" ({job.family})" if job.family else "")
        for stage in sorted(job.stages, key=lambda s: STAGE_ORDER.index(s.name)):
            text = stored.get((job.id or 0, stage.name.value))
            out.append(
                StageLogView(
                    job_id=job.id or 0,
                    job=label,
                    stage=stage.name.value,
                    status=stage.status.value,
                    text=served(text if text is not None else stage.log_tail),
                    whole=text is not None,
                )
            )
    return out


def as_text(entries: list[StageLogView]) -> Iterator[str]:
    """The logs as one text, each stage under its own heading line."""
    for e in entries:
        yield f"==> {e.job} · {e.stage} ({e.status}) <==\n"
        if not e.text:
            yield "(no output recorded)\n"
        elif not e.whole:
            yield f"(only the failure tail was sent)\n{e.text}"
        else:
            yield e.text
        if e.text and not e.text.endswith("\n"):
            yield "\n"
        yield "\n"
