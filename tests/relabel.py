"""Kept so that existing imports work: these names live in ``testkit.registry``
(shared with the benchmarks). Import them from there."""

from testkit.registry import relabel_wheel, relabelled_env  # noqa: F401
