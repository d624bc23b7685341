"""Feature regression against the previous build of a line, and import_error severity (pure)."""

from __future__ import annotations

from core import regression
from core.wire import Capability, Finding, Severity

EP = "cudnn.grouped_gemm_dglu_wrapper_sm100"


def cap(**kw: object) -> Capability:
    base: dict[str, object] = dict(
        importable=True, knob="deterministic", present=True, default="False",
        method="signature", entry_point=EP,
    )  # fmt: skip
    base.update(kw)
    return Capability.model_validate(base)


def test_a_lost_knob_is_a_feature_regression() -> None:
    (f,) = regression.regressions({"dglu": cap()}, {"dglu": cap(present=False, default=None)})
    assert (f.kind, f.severity, f.subject) == ("feature_regression", Severity.error, "dglu")
    assert "lost its 'deterministic' parameter" in f.message and EP in f.message


def test_a_lost_entry_point_is_a_feature_regression() -> None:
    gone = cap(importable=False, present=False, default=None, method=None,
               error="AttributeError: module 'cudnn' has no attribute 'x'")  # fmt: skip
    (f,) = regression.regressions({"dglu": cap()}, {"dglu": gone})
    assert (f.kind, f.severity) == ("feature_regression", Severity.error)
    assert "is gone" in f.message and "AttributeError" in f.message


def test_gains_and_equal_builds_are_not_regressions() -> None:
    absent = cap(present=False, default=None)
    assert regression.regressions({"dglu": absent}, {"dglu": cap()}) == []
    assert regression.regressions({"dglu": cap()}, {"dglu": cap()}) == []
    assert regression.regressions({}, {"dglu": cap()}) == []


def test_what_the_current_probe_could_not_see_is_not_a_regression() -> None:
    unreadable = cap(present=False, default=None, method=None)
    assert regression.regressions({"dglu": cap()}, {"dglu": unreadable}) == []
    assert regression.regressions({"dglu": cap()}, {}) == []


def test_a_changed_default_is_a_warning() -> None:
    (f,) = regression.regressions({"dsrelu": cap(default="None")}, {"dsrelu": cap(default="False")})
    assert (f.kind, f.severity) == ("knob_default_changed", Severity.warning)
    assert "from None to False" in f.message


def test_an_import_error_is_left_to_the_import_error_finding() -> None:
    failed = cap(importable=False, present=False, method=None, error="ImportError: no cutlass")
    err = Finding(kind="import_error", severity=Severity.warning, subject="dglu", message="m")
    assert regression.regressions({"dglu": cap()}, {"dglu": failed}, findings=[err]) == []
    assert len(regression.regressions({"dglu": cap()}, {"dglu": failed})) == 1


def test_import_error_is_an_error_only_when_the_previous_build_imported_it() -> None:
    err = Finding(kind="import_error", severity=Severity.warning, subject="dglu", message="m")
    other = Finding(kind="default_ignores_torch_flag", severity=Severity.info, subject="dglu",
                    message="n")  # fmt: skip
    (up, same) = regression.upgrade_import_errors([err, other], {"dglu": cap()})
    assert up.severity == Severity.error and "previous build" in up.message
    assert same == other
    never = {"dglu": cap(importable=False, present=False)}
    assert regression.upgrade_import_errors([err], never)[0].severity == Severity.warning
    assert regression.upgrade_import_errors([err], None)[0].severity == Severity.warning
    assert regression.import_error_severity("dglu", {"dglu": cap()}) == Severity.error
    assert regression.import_error_severity("dglu", {}) == Severity.warning
