"""TransformerEngine's grouped-MLP gate, asked the refusal rows: where it departs from the contract.

Where TransformerEngine imports, ``load_te_gate`` composes its own predicates (its reader of the
two knobs, each activation class's feature detection) the way its fused grouped MLP's backward
does; ``te_decision`` asks it one row under that row's request, and ``consumer_gaps`` turns each
row where it departs from the contract into a ``consumer_gap`` warning. Standard library, torch
and the candidate (and TransformerEngine, where installed) only.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core import subjects
from core.kinds import FindingKind
from runner.inside.documents import FindingDoc, RefusalRowDoc
from runner.inside.refusal_rows import SUBJECT_OF, Row, request_state


@dataclass(frozen=True)
class TEGate:
    """TransformerEngine's own predicates, composed the way its fused grouped MLP's backward is.

    The request is TE's reader of the two knobs; the capability is each activation class's
    feature detection. TE refuses a requested, non-unit-scale step whose kernel has no
    deterministic mode or that carries a scale bias, and passes the knob otherwise.
    """

    requested: Callable[[], Any]
    capable: Mapping[str, Callable[[], Any]]

    def decide(self, row: Row) -> str:
        if row.unit_scale or not self.requested():
            return "default"
        if row.scale_bias or not self.capable[row.activation]():
            return "refuse"
        return "deterministic"


_TE_MODULE = "transformer_engine.pytorch.ops.fused.grouped_mlp"
_TE_CLASSES = {a: s.consumer_class for a, s in subjects.consumer_subjects().items()}


def load_te_gate() -> tuple[TEGate | None, str]:
    """TE's gate where TransformerEngine imports here, else None and why not."""
    if importlib.util.find_spec("transformer_engine") is None:
        return None, "TransformerEngine is not installed in this environment"
    try:
        module = importlib.import_module(_TE_MODULE)
    except Exception as exc:  # TE's extension may be missing or built for another torch
        return None, f"{_TE_MODULE} does not import: {type(exc).__name__}: {exc}"
    requested = getattr(module, "_deterministic_algorithms_required", None)
    capable = {}
    for activation, cls_name in _TE_CLASSES.items():
        cls = getattr(module, cls_name, None)
        probe = getattr(cls, "grouped_gemm_dactivation_is_deterministic", None)
        if probe is None:
            return None, f"{_TE_MODULE}.{cls_name} has no determinism gate"
        capable[activation] = probe
    if requested is None:
        return None, f"{_TE_MODULE} has no _deterministic_algorithms_required"
    return TEGate(requested=requested, capable=capable), "TransformerEngine gate loaded"


def te_decision(gate: TEGate, row: Row) -> str:
    try:
        with request_state(row.request):
            return gate.decide(row)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def consumer_gaps(rows: list[RefusalRowDoc]) -> list[FindingDoc]:
    """One ``consumer_gap`` warning per row where TE's decision departs from the contract's."""
    findings: list[FindingDoc] = []
    for r in rows:
        te = r.get("te")
        if te is None or te == r["expected"]:
            continue
        row = Row.of(r)
        if r["expected"] == "deterministic":
            what = "this build offers the knob but TransformerEngine's gate"
        else:
            what = f"the contract says {r['expected']!r} but TransformerEngine's gate"
        findings.append(
            {
                "kind": FindingKind.consumer_gap,
                "severity": "warning",
                "subject": SUBJECT_OF[row.activation],
                "message": f"{row.describe()}: {what} decides {te!r}",
            }
        )
    return findings
