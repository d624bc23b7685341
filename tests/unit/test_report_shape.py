"""The build report keeps its shape: the schema is the one committed, and every report the H200
streams recorded (``docs/measurements/h200-stream-*.json``, the API's answers on a GPU host) reads
back through today's model field for field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.wire import BuildReport
from core.wire.__main__ import schema_text

ROOT = Path(__file__).resolve().parents[2]
STREAMS = sorted((ROOT / "docs" / "measurements").glob("h200-stream-*.json"))
# Fields added since and derived from the others (never empty): a job's ``shown`` word.
DERIVED = {"shown"}


def test_the_report_schema_is_the_committed_one() -> None:
    committed = (ROOT / "docs" / "report-schema.json").read_text()
    assert schema_text() == committed, (
        "the build report's shape changed: if that is meant, regenerate the committed schema "
        "with `python -m core.wire > docs/report-schema.json` (clients read this shape)"
    )


@pytest.mark.parametrize("stream", STREAMS, ids=[p.name for p in STREAMS])
def test_the_h200_reports_read_back_field_for_field(stream: Path) -> None:
    builds = json.loads(stream.read_text())["builds"]
    assert builds
    for build in builds:
        assert _read_back(build) == build, build["id"]


def _read_back(build: dict) -> dict:
    """The report through today's model, less the fields added since it was recorded (absent
    from it, and empty or derived): a field lost or renamed still shows."""
    known: Any = _known(BuildReport.model_validate(build).model_dump(mode="json"), build)
    return dict(known)


def _known(dumped: Any, recorded: Any) -> Any:
    if isinstance(dumped, dict) and isinstance(recorded, dict):
        return {
            k: _known(v, recorded.get(k))
            for k, v in dumped.items()
            if k in recorded or not (_empty(v) or k in DERIVED)
        }
    if isinstance(dumped, list) and isinstance(recorded, list) and len(dumped) == len(recorded):
        return [_known(d, r) for d, r in zip(dumped, recorded, strict=True)]
    return dumped


def _empty(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_empty(v) for v in value.values())
    return value in ([], "", None)


def test_a_field_the_report_lacks_is_caught() -> None:
    build = json.loads(STREAMS[0].read_text())["builds"][0]
    renamed = {**build, "verdict_why": build["verdict_reason"]}
    del renamed["verdict_reason"]
    assert _read_back(renamed) != renamed
