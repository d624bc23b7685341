"""Bounds on what a runner reports: the types the wire's models are made of.

A runner's posts come from outside the service, and much of them from the candidate's own code, so
the protocol's models refuse (422, before anything is stored) what no honest runner sends: a
number that is not finite, a negative count, a text longer than its column holds, an unbounded
list or free-form document, a config a subject does not declare. The widths are those of the
columns that store them (``service/models/``): where the database would have truncated,
refused (Postgres) or kept a megabyte (SQLite), the door refuses first.

Characters a store or a document cannot carry are replaced, not refused: NUL and the other C0
controls but tab, newline and carriage return (Postgres text refuses NUL, XML 1.0 all of them), lone
surrogates (no UTF-8 for them) and the non-characters U+FFFE and U+FFFF (XML 1.0) become U+FFFD in
every text of the protocol (``storable``), so a log or a reason holding one is stored on SQLite and
Postgres alike, never a 500 that the runner retries until its lease runs out. A log's C0 controls
become visible escapes instead (``loggable``: ``\\x1b[31m`` says more than U+FFFD).

The runner keeps within them when it builds a result: ``clip`` for texts it did not write itself
(a candidate's exception, pip's error lines), and ``fit`` for a candidate's stage document.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints

from core.subjects import SUBJECTS

TEXT_CHARS = 8192  # reasons, details, messages, errors: a few KB, well past any honest one
LOG_CHARS = 16384  # a log tail (the runner keeps 4,000 bytes of one)
NAME_CHARS = 200  # check names, entry points, GPU models, config names
SHORT_CHARS = 64  # subjects, kinds, knobs, label names
MAX_COUNT = 1_000_000  # runs and their tallies (the determinism stage stops at 64 by default)
MAX_SECONDS = 30 * 24 * 3600.0
JSON_DEPTH = 12  # a check's metrics, a drift row's config, a refusal row's call
JSON_NODES = 100_000

# What Postgres text or XML 1.0 refuses: C0 controls but tab, newline and CR; lone surrogates;
# U+FFFE and U+FFFF. Each becomes REPLACEMENT, one for one, so no length bound moves.
UNSTORABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """``text`` with every character a store or an XML document refuses shown as U+FFFD."""
    return UNSTORABLE.sub(REPLACEMENT, text)


def _storable(value: Any) -> Any:
    return storable(value) if isinstance(value, str) else value


# Before the string's own validation, which refuses a lone surrogate outright.
Storable = BeforeValidator(_storable)


Clean = Annotated[str, Storable]  # a text whose bound is its list's or its field's, storable
_C0 = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
_NOT_UNICODE = re.compile("[\ud800-\udfff\ufffe\uffff]")


def loggable(text: str) -> str:
    """A log's text made storable, its controls kept readable: each C0 control a store refuses as
    a visible escape (``\\x1b``: a terminal's escape sequences stay legible in the log), lone
    surrogates and U+FFFE/U+FFFF as U+FFFD."""
    escaped = _C0.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return _NOT_UNICODE.sub(REPLACEMENT, escaped)


def log_text(limit: int) -> BeforeValidator:
    """A log of at most ``limit`` characters as sent (the bound is the sender's: escaping may
    lengthen it), made ``loggable``."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if len(value) > limit:
            raise ValueError(f"a log of {len(value)} characters (at most {limit})")
        return loggable(value)

    return BeforeValidator(check)


Name = Annotated[str, StringConstraints(max_length=NAME_CHARS), Storable]
Phrase = Annotated[str, StringConstraints(max_length=100), Storable]  # a version, a default
Short = Annotated[str, StringConstraints(max_length=SHORT_CHARS), Storable]
Term = Annotated[str, StringConstraints(max_length=32), Storable]  # an output, a stop reason
Word = Annotated[str, StringConstraints(max_length=16), Storable]  # an arm, a method
Text = Annotated[str, StringConstraints(max_length=TEXT_CHARS), Storable]
# (the schema still says the bound a sender keeps to)
LogText = Annotated[str, log_text(LOG_CHARS), Field(json_schema_extra={"maxLength": LOG_CHARS})]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
# A runner's labels: arch=sm_90, gpu=NVIDIA H200, builder=1; a few short words, never a document.
Labels = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=SHORT_CHARS), Storable], Name],
    Field(max_length=32),
]


def _walk(value: Any, depth: int, seen: list[int]) -> Any:
    """``value`` checked against the bounds, its texts (keys too) made storable."""
    seen[0] += 1
    if seen[0] > JSON_NODES:
        raise ValueError(f"more than {JSON_NODES} values")
    if depth > JSON_DEPTH:
        raise ValueError(f"nested deeper than {JSON_DEPTH}")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError("an integer past 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > TEXT_CHARS:
            raise ValueError(f"a text of {len(value)} characters (at most {TEXT_CHARS})")
        return storable(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > NAME_CHARS:
                raise ValueError(f"a key longer than {NAME_CHARS} characters")
            out[storable(key)] = _walk(item, depth + 1, seen)
        return out
    if isinstance(value, list | tuple):
        return [_walk(item, depth + 1, seen) for item in value]
    raise ValueError(f"a {type(value).__name__} is not a JSON value")


def bounded_json(value: Any) -> Any:
    """A free-form document (a check's metrics): finite numbers, bounded texts, depth and size;
    its texts made storable (before its keys are validated as strings)."""
    return _walk(value, 0, [0])


JsonObject = Annotated[dict[str, Any], BeforeValidator(bounded_json)]


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    for _ in range(2):  # the note's own length counts against the limit
        note = f" [... {cut} more characters cut]"
        cut = len(text) - (limit - len(note))
    return text[: limit - len(note)] + note


def fit(doc: dict[str, Any]) -> dict[str, Any]:
    """A candidate's stage document within the text bounds, with non-finite numbers as null.

    What the candidate writes is clipped rather than refused where only its length or a NaN is
    wrong (an exception's long message, the max |err| of an all-NaN output): the stage's status
    and checks still stand. A name too long, a count out of range or a config the subject does
    not declare are still refused.
    """
    out = {k: _fit(v) for k, v in doc.items() if k != "log_tail"}
    if isinstance(doc.get("log_tail"), str):
        out["log_tail"] = doc["log_tail"][-LOG_CHARS:]  # a tail keeps its end
    return out


def _fit(value: Any) -> Any:
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _fit(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fit(v) for v in value]
    return value


# ---------------------------------------------------------------- config names


def config_names(metrics: dict[str, Any]) -> list[object]:
    """The config names a check's metrics report (``config.name`` and ``config_name``)."""
    found: list[object] = []
    config = metrics.get("config")
    if isinstance(config, dict) and "name" in config:
        found.append(config["name"])
    if "config_name" in metrics:
        found.append(metrics["config_name"])
    return found


@dataclass(frozen=True)
class Undeclared:
    """A config name its subject does not declare (``known`` None: no such subject)."""

    subject: str
    config: str
    known: tuple[str, ...] | None

    def __str__(self) -> str:
        if self.known is None:
            return f"{self.subject!r} is not a subject of the registry"
        names = ", ".join(self.known) or "none declared"
        return f"{self.subject} has no config {self.config!r}; known configs: {names}"


def undeclared(subject: str, names: Iterable[object]) -> Undeclared | None:
    """The first of ``names`` that is not a config ``subject`` declares in the registry."""
    known = SUBJECTS[subject].config_names if subject in SUBJECTS else None
    for name in names:
        if known is None or name not in known:
            return Undeclared(subject[:SHORT_CHARS], str(name)[:NAME_CHARS], known)
    return None
