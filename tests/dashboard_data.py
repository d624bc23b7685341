"""Kept so that existing imports work: these names live in ``testkit.dashboard_data``
(shared with the benchmarks). Import them from there."""

from testkit.dashboard_data import XSS_BRANCH, XSS_VERSION, seed_all, seed_many  # noqa: F401
