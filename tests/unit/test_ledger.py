"""ledger_findings: the version a build reports against the features it has (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from core.subjects import FEATURES, LEDGER_PATH, Feature
from core.wire import Finding, Severity
from runner.pipeline import ledger

DSRELU = "grouped_gemm_dsrelu.deterministic"  # documented from 1.28.0


def only(version: str, has: bool | None) -> list[tuple[str, Severity]]:
    return [
        (f.kind, f.severity)
        for f in ledger.ledger_findings(version, {DSRELU: has})
        if f.subject == "grouped_gemm_dsrelu"
    ]


MISMATCH = [("version_feature_mismatch", Severity.error)]
PREDATES = [("feature_predates_version", Severity.warning)]


def test_a_version_that_claims_a_missing_knob_is_an_error() -> None:
    (f,) = ledger.ledger_findings("1.28.0", {DSRELU: False})
    assert (f.kind, f.severity, f.subject) == (
        "version_feature_mismatch",
        Severity.error,
        "grouped_gemm_dsrelu",
    )
    assert f.message == (
        "reports 1.28.0 but grouped_gemm_dsrelu_wrapper_sm100 has no 'deterministic' parameter "
        "(documented from 1.28.0): a consumer's version gate would call a knob that is not there"
    )


def test_a_knob_older_than_its_version_is_a_warning() -> None:
    (f,) = ledger.ledger_findings("1.27.0", {DSRELU: True})
    assert (f.kind, f.severity) == ("feature_predates_version", Severity.warning)
    assert f.message.startswith(
        "reports 1.27.0 but grouped_gemm_dsrelu_wrapper_sm100 already takes 'deterministic'"
    )


@pytest.mark.parametrize(
    ("version", "has"), [("1.28.0", True), ("1.27.0", False), ("1.32.0", True)]
)
def test_agreement_gives_nothing(version: str, has: bool) -> None:
    assert only(version, has) == []


@pytest.mark.parametrize("version", ["1.27.0", "1.28.0", "1.28.0.dev0"])
def test_unknown_features_give_nothing(version: str) -> None:
    assert ledger.ledger_findings(version, {DSRELU: None}) == []


def test_an_import_error_of_a_subject_the_release_should_have_is_an_error() -> None:
    """Unread (None) above gives nothing; but a subject the build has and cannot import, in a
    release the ledger documents its knob for, is an error: a consumer of that release would
    reach for it. Before its release, or for an unparseable version, it stays as it was."""
    broken = Finding(
        kind="import_error", severity=Severity.warning, subject="grouped_gemm_dsrelu", message="m"
    )
    other = Finding(
        kind="knob_unreadable",
        severity=Severity.warning,
        subject="grouped_gemm_dsrelu",
        message="k",
    )
    (up, same) = ledger.claimed_import_errors("1.28.0", [broken, other])
    assert (up.kind, up.severity) == ("import_error", Severity.error)
    assert up.message == f"m (reports 1.28.0, and {DSRELU} is documented from 1.28.0)"
    assert same == other
    for version in ("1.27.0", "1.28.0.dev0", "not a version", None):
        assert ledger.claimed_import_errors(version, [broken]) == [broken]
    flex = broken.model_copy(update={"subject": "flex_attention_bwd"})  # documented from 1.29.0
    assert ledger.claimed_import_errors("1.28.0", [flex]) == [flex]
    assert ledger.claimed_import_errors("1.29.0", [flex])[0].severity == Severity.error
    assert ledger.ledger_findings(version, {}) == []


@pytest.mark.parametrize(
    ("version", "has", "expected"),
    [
        # a pre-release or dev build of 1.28.0 is on its way there: no claim, no predating
        ("1.28.0.dev0", True, []),
        ("1.28.0.dev0", False, []),
        ("1.28.0rc1", False, []),
        # post releases, local builds and dev builds of a later release claim 1.28.0
        ("1.28.0.post1", False, MISMATCH),
        ("1.28.0+g1a2b3c", False, MISMATCH),
        ("1.28.1.dev0", False, MISMATCH),
        ("1.28.0+g1a2b3c", True, []),
        # a dev build of an earlier release predates it (the seed's feature branch)
        ("1.27.1.dev3", True, PREDATES),
        ("1.27.0+feature", True, PREDATES),
        ("1.27.0rc1", False, []),
    ],
)
def test_dev_and_local_versions(version: str, has: bool, expected: list) -> None:
    assert only(version, has) == expected


def test_an_unparseable_version_gives_nothing() -> None:
    assert ledger.ledger_findings("not-a-version", {DSRELU: False}) == []


def _release_before(version: str) -> str:
    major, minor, micro = Version(version).release[:3]
    return f"{major}.{minor}.{micro - 1}" if micro else f"{major}.{minor - 1}.0"


@pytest.mark.parametrize("feature", FEATURES, ids=lambda f: f.id)
def test_every_feature_the_probe_detects_is_judged_at_its_release(feature: Feature) -> None:
    """Each feature of the registry (what the probe detects on a build) turns into findings on
    both sides of the release the ledger documents it from, in the registry's words; a feature
    with no release history would never be judged, and this fails for it."""
    history = {f.id: f for f in ledger.load_ledger()}
    assert feature.id in history, f"{feature.id} has no release history in {LEDGER_PATH.name}"
    entry = history[feature.id]
    assert entry.source and entry.evidence  # where the release comes from, and what was seen
    since, before = entry.since, _release_before(entry.since)

    def found(version: str, has: bool) -> list[tuple[str, str, str]]:
        return [
            (f.kind, f.subject, f.message)
            for f in ledger.ledger_findings(version, {feature.id: has})
        ]

    # the release that documents it, without it: a consumer's version gate would break
    assert found(since, False) == [
        (
            "version_feature_mismatch",
            feature.subject,
            f"reports {since} but {feature.lacks} (documented from {since}): "
            f"{feature.mismatch_effect or ledger.MISMATCH_EFFECT}",
        )
    ]
    # the release before, already with it: the knob predates the version
    assert found(before, True) == [
        (
            "feature_predates_version",
            feature.subject,
            f"reports {before} but {feature.has} (documented from {since}): "
            f"{feature.predates_effect or ledger.PREDATES_EFFECT}",
        )
    ]
    # each side of the line as documented: nothing to say
    assert found(since, True) == found(before, False) == []
    # a later release that lacked it again still claims it: a version gate would call it there
    for release in entry.missing_in:
        assert [kind for kind, _, _ in found(release, False)] == ["version_feature_mismatch"]


def test_the_ledger_file_keeps_only_release_history() -> None:
    """What a feature is lives in the registry; an entry of the ledger file that described it
    again would override the registry's words in every finding (one fact, one place)."""
    raw = json.loads(LEDGER_PATH.read_text())["features"]
    described = {"subject", "entry_points", "detect", "has", "lacks"}
    assert [sorted(described & set(entry)) for entry in raw] == [[] for _ in raw]


def test_history_for_an_undeclared_feature_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"features": [{"id": "nope.knob", "since": "1.0.0"}]}))
    with pytest.raises(ValueError, match=r"nope\.knob"):
        ledger.load_ledger(path)


def test_messages_come_from_the_ledger_entry() -> None:
    entry = ledger.LedgerFeature(
        id="x.optional_y",
        subject="x",
        entry_points=("cudnn.x",),
        detect={"method": "doc_pattern", "pattern": "y: Optional"},
        since="2.0.0",
        has="x already documents y as optional",
        lacks="x still requires y",
        mismatch_effect="a gated caller would omit y and fail",
        source="test",
    )
    (f,) = ledger.ledger_findings("2.1.0", {"x.optional_y": False}, (entry,))
    assert f.message == (
        "reports 2.1.0 but x still requires y (documented from 2.0.0): "
        "a gated caller would omit y and fail"
    )
    assert ledger.ledger_findings("2.1.0", {"x.optional_y": True}, (entry,)) == []
