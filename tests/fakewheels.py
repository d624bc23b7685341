"""Kept so that existing imports work: these names live in ``testkit.wheels``
(shared with the benchmarks). Import them from there."""

from testkit.wheels import HANG, SEGFAULT, make_wheel, sleepy  # noqa: F401
