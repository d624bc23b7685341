"""Short text for places with a limit: one line, cut on a word boundary with an ellipsis.

Used for the verdict's reason, the cause list's reasons, and GitHub's status descriptions (140
characters), so a reader never gets half a word or a 700-character compiler message in one line.

And text a candidate wrote, shown as text (``visible``): every control character a terminal or a
page would act on, but newline and tab, as a visible escape.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 stage``, ``2 stages``, ``0 stages``: a count and its noun, agreeing."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def one_line(text: str) -> str:
    """Every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut after the last whole word that
    fits, with an ellipsis; a first word longer than the limit is cut inside it."""
    flat = one_line(text)
    if len(flat) <= limit:
        return flat
    if limit <= len(ELLIPSIS):
        return ELLIPSIS[:limit]
    room = flat[: limit - len(ELLIPSIS) + 1]  # one more: a space there means a whole last word
    cut = room.rfind(" ")
    head = room[:cut] if cut > 0 else room[:-1]
    return head.rstrip(" ,;:-") + ELLIPSIS


# C0 controls but tab and newline (CR included: it overwrites a line), DEL, the C1 controls
# (U+009B is a terminal's CSI), and the bidirectional overrides and isolates that reorder a line.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with each control character but newline and tab as a visible escape (``\\x1b``,
    ``\\x0d``, ``\\u202e``): a clear-screen, a window title, a hyperlink or a carriage return
    that overwrites the line before are shown, not acted on. A CR before a newline is a line end."""
    return _CONTROLS.sub(_escape, text.replace("\r\n", "\n"))
