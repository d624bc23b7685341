"""Kept so that existing imports work: these names live in ``testkit.registry``
(shared with the benchmarks). Import them from there."""

from testkit.registry import CACHE, candidate_env, registry_wheel  # noqa: F401
