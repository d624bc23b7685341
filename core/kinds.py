"""Every kind of finding, named once. Standard library only: a candidate stage names the kinds it
reports (``import_error``, ``consumer_gap``, ``compile_only_unavailable``) from the private copy of
core it is given. ``docs/determinism.md``'s table of finding kinds lists exactly these
(``tests/unit/test_finding_kinds.py``); the stage each comes from is ``core.verdict``'s."""

from __future__ import annotations

from enum import StrEnum


class FindingKind(StrEnum):
    # the probe: the build against itself, its ledger and the line's previous build
    import_error = "import_error"
    version_feature_mismatch = "version_feature_mismatch"
    feature_predates_version = "feature_predates_version"
    feature_regression = "feature_regression"
    knob_removed = "knob_removed"
    knob_default_changed = "knob_default_changed"
    knob_added = "knob_added"
    # the probe: the build's determinism surface read from its source
    knob_not_covered = "knob_not_covered"
    source_unparsable = "source_unparsable"
    surface_truncated = "surface_truncated"
    # determinism, against the previous measurement of a comparison point's series
    deterministic_bits_changed = "deterministic_bits_changed"
    determinism_cost_regressed = "determinism_cost_regressed"
    comparison_point_changed = "comparison_point_changed"
    compile_only_unavailable = "compile_only_unavailable"
    # refusal: the reference consumer against the contract
    consumer_gap = "consumer_gap"
