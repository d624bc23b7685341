"""Knobs measured to change nothing on a family, shown beside them in a build's coverage table.

A knob that changes no byte on a family, where its engine is reproducible without it, is no
subject there: its control would never vary, and a check whose control never varies proves
nothing (every verdict ``inconclusive``). What was measured is still a fact about the build's
surface, so the coverage row of such a knob says it, with where it was measured. Standard library
only (the probe imports ``core/surface.py`` inside the candidate's environment).
"""

from __future__ import annotations

# (the entry point's last name, the knob) -> the measurement. The method's module moved
# (``pygraph`` up to 1.26.0, ``backend_graph`` from 1.27.0): the last name matches both.
NO_EFFECT: dict[tuple[str, str], str] = {
    ("sdpa_fp8_backward", "use_deterministic_algorithm"): (
        "sm_90: off and on gave the same bytes, one pattern over 12 runs each (H200, cuDNN "
        "9.19.0, 1.32.0, b2 h16 s4096 d128 causal; docs/measurements/h200-2026-12-05b.md)"
    ),
}


def no_effect(entry_point: str | None, knob: str | None) -> str:
    """The measurement that ``knob`` of ``entry_point`` changes nothing, or ""."""
    name = (entry_point or "").rsplit(".", 1)[-1]
    return NO_EFFECT.get((name, knob or ""), "")
