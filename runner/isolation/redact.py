"""The runner's secrets, and their removal from everything a candidate wrote.

Candidate code never sees a secret (``allowlist.py`` decides its environment); this is the second
line: every value of a runner secret is replaced by ``[redacted]`` in a stage's document, its
reason, its checks and its log tail before any of it leaves the runner. A secret is the value of
a variable whose name says it is one (``is_secret_name``), at least ``MIN_LENGTH`` characters long
(a shorter value would redact ordinary words), from the runner's environment, its settings and
the local service's tokens file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypeVar

REDACTED = "[redacted]"
MIN_LENGTH = 8

# Names that hold a secret: the service's and the runner's tokens (FE_CI_SUBMIT_TOKEN,
# FE_CI_RUNNER_TOKEN, FE_CI_ADMIN_TOKEN), the webhook secret, GitHub's token and App key, a
# database URL with its password, and the usual shapes of other tools' credentials.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE_KEY|API_KEY|GITHUB|^FE_CI_DATABASE_URL$",
    re.IGNORECASE,
)

T = TypeVar("T")


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret (its value is never handed to a candidate)."""
    return bool(_SECRET_NAME.search(name))


def tokens_file_values(path: Path) -> list[str]:
    """The values of ``FE_CI_*=value`` lines of a tokens file (the local service's), if readable."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and is_secret_name(key.strip()):
            out.append(value.strip())
    return out


def runner_secrets(
    environ: Mapping[str, str] | None = None, extra: Iterable[str | None] = ()
) -> tuple[str, ...]:
    """Every secret value the runner holds: secret-named variables of ``environ`` (default: this
    process's) and ``extra`` (settings, a tokens file), longest first, each at least
    ``MIN_LENGTH`` long."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_name(k)}
    values.update(v for v in extra if v)
    kept = {v.strip() for v in values if len(v.strip()) >= MIN_LENGTH}
    return tuple(sorted(kept, key=lambda v: (-len(v), v)))


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``[redacted]``."""
    for secret in secrets:  # longest first: a secret that contains another goes whole
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
