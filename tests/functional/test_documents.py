"""One contract for the documents a stage writes inside the candidate, mirrored by the wire.

The runner reads those documents as untrusted input: a document with an unknown or a missing key
is refused as a stage ``error`` that says why, never passed on with the odd key dropped.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from core import wire
from core.wire import Stage, Status
from runner.inside import documents, probe, refusal
from runner.pipeline import pipeline, pipeline_options
from testkit.wheels import make_wheel

MIRRORS: list[tuple[type, type[BaseModel], frozenset[str]]] = [
    (documents.CheckDoc, wire.Check, frozenset()),
    (documents.FindingDoc, wire.Finding, frozenset()),
    (documents.CapabilityDoc, wire.Capability, frozenset()),
    (documents.DriftDoc, wire.DriftRow, frozenset()),
    (documents.RefusalRowDoc, wire.RefusalRow, documents.REFUSAL_ROW_LOCAL),
]


def all_keys(doc_type: type) -> set[str]:
    required, optional = documents.keys(doc_type)
    return set(required | optional)


@pytest.mark.parametrize(("doc_type", "model", "local"), MIRRORS)
def test_the_wire_mirrors_each_inner_document(
    doc_type: type, model: type[BaseModel], local: frozenset[str]
) -> None:
    filled_by_the_service = documents.WIRE_ONLY.get(model.__name__, frozenset())
    assert all_keys(doc_type) - local == set(model.model_fields) - filled_by_the_service


def test_the_wire_carries_exactly_the_stage_result_keys() -> None:
    carried = set(wire.StageResult.model_fields) - {"name", "duration_s"}
    assert carried == documents.STAGE_RESULT_KEYS
    for doc_type in documents.STAGE_DOCS.values():
        assert all_keys(documents.StageDoc) <= all_keys(doc_type)
    assert all_keys(documents.ErrorDoc) <= documents.STAGE_RESULT_KEYS


def _probe_doc() -> dict[str, Any]:
    return dict(probe.probe({}))  # this interpreter has no frontend: still a whole document


def test_the_stages_documents_keep_the_contract() -> None:
    assert documents.problems("probe", _probe_doc()) == []
    assert documents.problems("refusal", refusal.run({})) == []
    assert documents.problems("probe", {"status": "error", "reason": "x", "log_tail": ""}) == []


def test_unknown_and_missing_keys_are_named_at_any_depth() -> None:
    doc = _probe_doc()
    doc["smuggled"] = 1
    del doc["unread"]
    doc["checks"][0]["extra"] = True
    del next(iter(doc["capabilities"].values()))["knob"]
    found = documents.problems("probe", doc)
    assert "has unknown keys ['smuggled']" in found[0]
    assert "lacks keys ['unread']" in found[1]
    assert any(p.startswith("checks[0] has unknown keys ['extra']") for p in found)
    assert any("capabilities[" in p and "lacks keys ['knob']" in p for p in found)
    assert documents.problems("refusal", ["not", "a", "mapping"]) == [
        "the document is list, not an object"
    ]
    # an error document may be short, but not carry what no document has
    assert documents.problems("refusal", {"status": "error", "reason": "x", "extra": 1})


SMUGGLER = """
import sys

_io = sys.modules.get("runner.inside._io")
if _io is not None:
    _real = _io.write_json_atomic

    def _write(path, doc):
        _real(path, dict(doc, smuggled="from the candidate"))

    _io.write_json_atomic = _write
"""


def test_the_pipeline_refuses_a_document_with_an_unknown_key(tmp_path: Path) -> None:
    """A real candidate whose import rewrites the probe's document on its way out."""
    wheel = make_wheel(tmp_path / "wheel", "9.1.0", SMUGGLER)
    # the work dir lies outside pytest's private tree, whose mode another session may reset
    with tempfile.TemporaryDirectory(prefix="fe-ci-documents-") as work:
        opts = pipeline_options.Options(stages=[Stage.probe], work_dir=Path(work), layers_dir=None)
        result = pipeline.Pipeline(opts).run(wheel)
    by_name = {s.name: s for s in result.stages}
    assert by_name[Stage.install].status == Status.pass_, by_name[Stage.install].reason
    probed = by_name[Stage.probe]
    assert probed.status == Status.error
    assert "does not accept" in probed.reason and "unknown keys ['smuggled']" in probed.reason
    assert result.capabilities == {}
