"""The probe's surface through the real runner pipeline (install, sandboxed probe, the runner's
checks of its document), against a previous report's surface as ``fe-ci validate --previous``
gives it: a real wheel built here whose ``cudnn`` keeps one knob (its default changed), adds
one and lacks one the previous build had."""

from __future__ import annotations

import tempfile
from pathlib import Path

from core.wire import Stage, Status
from runner.pipeline import pipeline, pipeline_options
from testkit.wheels import make_wheel

INIT = """
def wrap(x, deterministic=False):
    return x

def fresh(x, *, deterministic=None):
    return x

__all__ = ["wrap", "fresh"]
"""


def _knob(entry: str, default: str) -> dict[str, str]:
    return {"entry_point": entry, "knob": "deterministic", "default": default,
            "kind": "parameter", "method": "ast"}  # fmt: skip


def test_validate_previous_names_the_knob_removed_and_the_knob_not_covered(
    tmp_path: Path,
) -> None:
    wheel = make_wheel(tmp_path / "wheel", "9.2.0", INIT)
    previous = [_knob("cudnn.wrap", "True"), _knob("cudnn.gone", "False")]
    with tempfile.TemporaryDirectory(prefix="fe-ci-surface-") as work:
        opts = pipeline_options.Options(
            stages=[Stage.probe], work_dir=Path(work), layers_dir=None, previous_surface=previous
        )
        result = pipeline.Pipeline(opts).run(wheel)
    probed = {s.name: s for s in result.stages}[Stage.probe]
    assert probed.status == Status.pass_, probed.reason
    assert {(k.entry_point, k.default) for k in probed.surface} == {
        ("cudnn.wrap", "False"),
        ("cudnn.fresh", "None"),
    }
    found = {(f.kind, f.severity.value, f.message.split(" ", 1)[0]) for f in probed.findings}
    assert ("knob_removed", "error", "cudnn.gone(deterministic=False)") in found
    assert ("knob_default_changed", "warning", "cudnn.wrap's") in found
    assert ("knob_added", "info", "cudnn.fresh(deterministic=None)") in found
    assert ("knob_not_covered", "warning", "cudnn.fresh(deterministic=None):") in found
    assert ("knob_not_covered", "warning", "cudnn.wrap(deterministic=False):") in found
