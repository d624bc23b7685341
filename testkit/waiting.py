"""``eventually``: the one way tests and benchmarks wait for something another process does.

A test waits on an observable state (a report's status, a file, a log line, a process gone), never
a fixed time: polled, bounded by a timeout, and on failure it says what it waited for and the
last value it saw, so a timeout reads as a diagnosis rather than ``assert False``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_SHOWN = 3000  # characters of the last value a failure shows


def eventually(
    predicate: Callable[[], T],
    *,
    until: Callable[[T], object] = bool,
    timeout: float = 30.0,
    interval: float = 0.1,
    message: str = "",
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """``predicate()``, called every ``interval`` seconds until its result is truthy (or
    ``until(result)`` holds): that result. Past ``timeout`` seconds an AssertionError names
    ``message`` and the last result (or the last of the ``ignoring`` exceptions, which count as
    "not yet"; any other exception propagates at once)."""
    deadline = time.monotonic() + timeout
    last: object
    while True:
        try:
            result = predicate()
        except ignoring as exc:
            last = exc
        else:
            if until(result):
                return result
            last = result
        if time.monotonic() >= deadline:
            seen = repr(last)
            if len(seen) > _SHOWN:
                seen = f"{seen[:_SHOWN]}... ({len(seen)} characters)"
            what = message or getattr(predicate, "__name__", "a condition")
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {seen}")
        time.sleep(interval)
