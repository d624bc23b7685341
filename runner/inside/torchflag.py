"""``torch.use_deterministic_algorithms`` as a subject's knob: set around one run, put back after.

A subject whose knob is the torch flag (``core.subjects.TORCH_FLAG``) runs its control arm with the
flag off and its deterministic arm with the flag on; the deterministic arm's runs alternate
between ``on`` and ``on, warn_only=True``, so that arm is bit-exact only when warn-only mode gives
the same bytes as the flag itself. The flag and its warn-only setting are restored after every
run, also when the run raises. Standard library and torch only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

MODES = ("off", "on", "warn_only")
T = TypeVar("T")


def state() -> tuple[bool, bool]:
    """(the flag, its warn-only setting) as this process has them now."""
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


@contextlib.contextmanager
def flag(mode: str) -> Iterator[None]:
    """The torch flag set to ``mode`` (``off``, ``on``, ``warn_only``), put back as found."""
    if mode not in MODES:
        raise ValueError(f"torch flag mode must be one of {MODES}, got {mode!r}")
    was_on, was_warn_only = state()
    try:
        torch.use_deterministic_algorithms(mode != "off", warn_only=mode == "warn_only")
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)


class Arms:
    """Which mode each run of a torch-flag subject takes: the control arm ``off``; the
    deterministic arm ``on`` and ``warn_only`` in turn (its first run ``on``), or only the modes
    given, for a path the strict flag cannot reach (PyTorch's SDPA rules cuDNN out under it)."""

    def __init__(self, deterministic: tuple[str, ...] = ("on", "warn_only")) -> None:
        if not deterministic or not set(deterministic) <= {"on", "warn_only"}:
            raise ValueError(f"a deterministic arm runs 'on' or 'warn_only', got {deterministic}")
        self.deterministic = deterministic
        self.deterministic_runs = 0
        self.modes: list[str] = []

    def mode(self, knob: bool) -> str:
        if not knob:
            return "off"
        mode = self.deterministic[self.deterministic_runs % len(self.deterministic)]
        self.deterministic_runs += 1
        return mode

    def run(self, knob: bool, body: Callable[[], T]) -> T:
        """``body()`` under the mode of this run; the flag restored after it, raise or not."""
        mode = self.mode(knob)
        self.modes.append(mode)
        with flag(mode):
            return body()
