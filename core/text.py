"""Short text for places with a limit: one line, cut on a word boundary with an ellipsis.

Used for the verdict's reason, the cause list's reasons, and GitHub's status descriptions (140
characters), so a reader never gets half a word or a 700-character compiler message in one line.
"""

from __future__ import annotations

ELLIPSIS = "…"


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
