"""What the pipeline's stages hand back: the run's ``Result``, and a stage's ``StageResult`` made
from the document it wrote (the candidate's output, so checked against the wire's bounds) or from
a process that did not finish well."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.bounds import fit
from core.wire import (
    LOG_MAX_CHARS,
    Capability,
    Environment,
    Finding,
    Stage,
    StageResult,
    Status,
)
from core.wire.results import undeclared_configs
from runner.inside import documents
from runner.isolation import redact, sandbox


@dataclass
class Result:
    stages: list[StageResult] = field(default_factory=list)
    capabilities: dict[str, Capability] = field(default_factory=dict)
    environment: Environment = field(default_factory=Environment)
    version: str | None = None
    chosen_configs: dict[str, str] = field(default_factory=dict)
    negative_control: bool = False

    @property
    def findings(self) -> list[Finding]:
        return [f for s in self.stages for f in s.findings]


def stage_from_doc(name: Stage, doc: dict[str, Any], duration: float) -> StageResult:
    """The stage's result, its texts clipped to the wire's bounds (``bounds.fit``)."""
    fields = {k: v for k, v in fit(doc).items() if k in StageResult.model_fields and k != "name"}
    fields.setdefault("status", Status.error)
    return StageResult.model_validate({**fields, "name": name, "duration_s": duration})


def accepted(name: Stage, doc: dict[str, Any], duration: float) -> StageResult | str:
    """The stage's result from its (key-checked) document, or why a value of it is refused.

    The document is the candidate's output: a value out of the wire's bounds (say, a timings
    table too large) makes the stage an error that says where, never a crash of the runner.
    """
    try:
        result = stage_from_doc(name, doc, duration)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p)[:40] for p in err["loc"][:4])
        return f"{where}: {err['msg']} ({exc.error_count()} problems)"
    if bad := undeclared_configs(result):  # the service would refuse the post
        return str(bad)
    return result


def rows_from_determinism(determinism_doc: dict[str, Any]) -> StageResult | None:
    """The refusal stage's result from the frontend rows the determinism stage's process ran
    (its document's ``frontend_refusal``, the candidate's output: checked as the refusal stage's
    own document would be), or None where it holds none (then the stage runs on its own)."""
    doc = determinism_doc.get("frontend_refusal")
    if not isinstance(doc, dict):
        return None
    why = "; ".join(documents.problems(Stage.refusal.value, doc))
    seconds = (doc.get("timings") or {}).get("stage", {}) if not why else {}
    rows_s = seconds.get("rows_s") if isinstance(seconds, dict) else None
    duration = float(rows_s) if isinstance(rows_s, int | float) and 0 <= rows_s < 1e6 else 0.0
    result = why or accepted(Stage.refusal, doc, duration)
    if isinstance(result, str):
        return StageResult(
            name=Stage.refusal,
            status=Status.error,
            reason="the frontend refusal rows of the determinism stage's process wrote a "
            f"document the runner does not accept: {result}",
        )
    return result


def failed_stage(name: Stage, outcome: sandbox.Outcome) -> StageResult:
    """The result of a stage whose process failed, timed out or crashed."""
    status = {
        "timeout": Status.timeout,
        "crashed": Status.crashed,
    }.get(outcome.status, Status.error)
    return StageResult(
        name=name,
        status=status,
        reason=outcome.describe(),
        duration_s=outcome.duration_s,
        log_tail=outcome.log_tail,
    )


# The files each stage writes its output to, under ``<work dir>/logs`` (numerics comes from the
# determinism stage's process, whose log is sent once, with determinism).
STAGE_LOGS: dict[Stage, tuple[str, ...]] = {
    Stage.build: ("build.log",),
    Stage.install: ("install-warm.log", "install.log"),
    Stage.probe: ("probe.log",),
    Stage.determinism: ("determinism.log",),
    Stage.refusal: ("refusal.log",),
}


def stage_log(
    work_dir: Path, stage: Stage, limit: int = LOG_MAX_CHARS, secrets: tuple[str, ...] = ()
) -> str | None:
    """The end of a stage's log files (at most ``limit`` characters), or None without any; the
    candidate's output, so every runner secret in ``secrets`` is taken out.

    A longer log is cut at its start, and says so in its first line.
    """
    parts: list[bytes] = []
    total = 0
    for name in STAGE_LOGS.get(stage, ()):
        path = work_dir / "logs" / name
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - limit))
                parts.append(fh.read(limit))
                total += size
        except OSError:
            continue
    if not parts:
        return None
    text = redact.redact_text(b"".join(parts).decode("utf-8", "replace"), secrets)
    if total <= limit and len(text) <= limit:
        return text
    note = f"[the first {total - limit} bytes of this log are left out]\n"
    return note + text[-(limit - len(note)) :]


def redacted(result: StageResult, secrets: tuple[str, ...]) -> StageResult:
    """``result`` with every runner secret taken out of every string it holds."""
    if not secrets:
        return result
    return StageResult.model_validate(redact.redact(result.model_dump(mode="json"), secrets))


def libcudnn(env: dict[str, Any]) -> dict[str, list[str]]:
    """The stage's word on the libcudnn torch and the frontend loaded, as the wire bounds it (a
    stage's document is the candidate's output: anything else is dropped). Empty where the
    stage saw no libcudnn mapped at all."""
    try:
        said = Environment.model_validate({"libcudnn": env.get("libcudnn") or {}}).libcudnn
    except ValueError:
        return {}
    return said if any(said.values()) else {}
