"""Secrets, both sides: the local service's tokens file, and the removal of a secret's every
occurrence from text and documents.

The service redacts what a runner posts (``service/results/logs.py``) and the runner what a
candidate wrote (``runner/isolation/redact.py``) with these functions. A secret shorter than
``MIN_LENGTH`` is never a secret here (it would redact ordinary words; the settings refuse
tokens that short). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

REDACTED = "[redacted]"
MIN_LENGTH = 8
# The local service's generated tokens, under its data directory: ``FE_CI_<NAME>=value`` lines
# (``fe-ci serve`` writes it mode 0600; the runner and ``fe-ci pin`` read it on the same host).
TOKENS_FILE = "tokens.env"

T = TypeVar("T")


def read_tokens(path: Path) -> dict[str, str]:
    """Every ``FE_CI_<NAME>=value`` line of a tokens file by its variable's name; empty when the
    file is missing or unreadable."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key.startswith("FE_CI_"):
            out[key] = value.strip()
    return out


def kept(values: Iterable[str | None]) -> tuple[str, ...]:
    """The secrets among ``values``: stripped, at least ``MIN_LENGTH`` long, once each, longest
    first (a secret that contains another is redacted whole)."""
    found = {v.strip() for v in values if v and len(v.strip()) >= MIN_LENGTH}
    return tuple(sorted(found, key=lambda v: (-len(v), v)))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``[redacted]``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: T, secrets: tuple[str, ...]) -> T:
    """A JSON-shaped value (a stage's document) with every string, keys included, redacted."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact_text(value, secrets)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {  # type: ignore[return-value]
            (redact_text(k, secrets) if isinstance(k, str) else k): redact(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(redact(v, secrets) for v in value)
    return value
