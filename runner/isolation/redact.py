"""The runner's secrets, and their removal from everything a candidate wrote.

Candidate code never sees a secret (``allowlist.py`` decides its environment); this is the second
line: every value of a runner secret is replaced by ``[redacted]`` in a stage's document, its
reason, its checks and its log tail before any of it leaves the runner. A secret is the value of
a variable whose name says it is one (``is_secret_name``), at least ``MIN_LENGTH`` characters long
(a shorter value would redact ordinary words), from the runner's environment, its settings and
the local service's tokens file. The redaction itself is core's (``core/redaction.py``), the
service's too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from core.redaction import MIN_LENGTH, REDACTED, kept, redact, redact_text

__all__ = ["MIN_LENGTH", "REDACTED", "is_secret_name", "redact", "redact_text", "runner_secrets"]

# Names that hold a secret: the service's and the runner's tokens (FE_CI_SUBMIT_TOKEN,
# FE_CI_RUNNER_TOKEN, FE_CI_ADMIN_TOKEN), the webhook secret, GitHub's token and App key, a
# database URL with its password, and the usual shapes of other tools' credentials.
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|CREDENTIAL|PRIVATE_KEY|API_KEY|GITHUB|^FE_CI_DATABASE_URL$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret (its value is never handed to a candidate)."""
    return bool(_SECRET_NAME.search(name))


def runner_secrets(
    environ: Mapping[str, str] | None = None, extra: Iterable[str | None] = ()
) -> tuple[str, ...]:
    """Every secret value the runner holds: secret-named variables of ``environ`` (default: this
    process's) and ``extra`` (settings, a tokens file), longest first, each at least
    ``MIN_LENGTH`` long."""
    env = os.environ if environ is None else environ
    return kept([*(v for k, v in env.items() if is_secret_name(k)), *extra])
