"""A knob measured to change nothing on a family (core/knob_effects.py) says so in a build's
coverage table: 1.32.0's measured surface (core/surface_ledger.json), whose FP8 SDPA backward
takes ``use_deterministic_algorithm`` and, on the H200, gave the same bytes with it off and on."""

from __future__ import annotations

import json
from pathlib import Path

from core import knob_effects, surface

ROOT = Path(__file__).resolve().parents[2]
KNOBS = json.loads((ROOT / "core" / "surface_ledger.json").read_text())["releases"]["1.32.0"][
    "knobs"
]


def _row(entry_point_end: str) -> dict:
    (row,) = [
        r
        for r in surface.coverage(KNOBS, {}, set(), {})
        if r["entry_point"].endswith(entry_point_end) and r["knob"] == "use_deterministic_algorithm"
    ]
    return row


def test_the_fp8_backwards_knob_says_it_was_measured_without_effect() -> None:
    row = _row(".sdpa_fp8_backward")
    assert row["status"] == surface.UNCOVERED  # still no subject: its control would never vary
    assert row["why"].startswith("no subject exercises it; measured without effect on sm_90")
    assert "docs/measurements/h200-2026-12-05b.md" in row["why"]
    # the MXFP8 backward was not measured: nothing is said of it
    assert _row(".sdpa_mxfp8_backward")["why"] == "no subject exercises it"


def test_the_fact_follows_the_method_where_its_module_moved() -> None:
    """``pygraph`` up to 1.26.0, ``backend_graph`` from 1.27.0: the same method, the same fact."""
    for module in ("pygraph", "backend_graph"):
        ep = f"cudnn._compiled_module.{module}.sdpa_fp8_backward"
        assert knob_effects.no_effect(ep, "use_deterministic_algorithm").startswith("sm_90:")
    assert knob_effects.no_effect("cudnn.sdpa_fp8_backward", "deterministic") == ""
    assert knob_effects.no_effect(None, None) == ""
