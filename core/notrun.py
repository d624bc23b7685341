"""What did not run, in one wording for every reader: the verdict's reason, ``fe-ci validate``
and ``fe-ci submit --wait``, the JUnit XML's skipped testcases, and the build page.

A subject whose determinism did not run is ``skipped`` (it could have run: no runner of its
family, excluded by ``--stages``) or ``not_applicable`` (this build cannot run it: not importable,
no knob). Both are said alike: the status in words, then the report's reason (``NotRun.reason``,
which the grid's hover shows as it is), never the status twice.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.text import plural
from core.wire import NotRun, Status

WORDS = {Status.skipped: "skipped", Status.not_applicable: "not applicable"}


def said(status: Status, reason: str) -> str:
    """``skipped: no sm_100 runner``, ``not applicable: not importable: ...``: the status word,
    then why; a reason that already starts with the status (either spelling) says it once."""
    word = WORDS.get(status, status.value)
    text = reason  # as it is, to its last character (a reason of its own may end in ": ")
    for prefix in (f"{word}:", f"{status.value}:"):
        if text.startswith(prefix):
            text = text[len(prefix) :].lstrip(" ")
            break
    return f"{word}: {text}" if text else word


def said_of(item: NotRun) -> str:
    return said(item.status, item.reason)


def ordered(items: Iterable[NotRun]) -> list[NotRun]:
    """Skipped first (they hold the verdict below ``pass``), then not applicable; by name."""
    rank = {Status.skipped: 0, Status.not_applicable: 1}
    return sorted(items, key=lambda n: (rank.get(n.status, 2), n.subject))


def lines(items: Iterable[NotRun]) -> list[str]:
    """One line a subject: ``sdpa_bwd: not applicable: this build has no 'deterministic'``."""
    return [f"{n.subject}: {said_of(n)}" for n in ordered(items)]


def summary(items: Iterable[NotRun]) -> str:
    """``3 subjects did not run: a, b: skipped: no sm_100 runner; c: not applicable: ...``:
    every one named, those with the same words together; "" when every subject ran."""
    by_words: dict[str, list[str]] = {}
    for n in ordered(items):
        by_words.setdefault(said_of(n), []).append(n.subject)
    if not by_words:
        return ""
    count = sum(len(names) for names in by_words.values())
    parts = [f"{', '.join(names)}: {words}" for words, names in by_words.items()]
    return f"{plural(count, 'subject')} did not run: {'; '.join(parts)}"
