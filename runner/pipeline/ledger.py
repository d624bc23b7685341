"""The version/feature ledger: does what a build has match what its version claims?

Each subject's declaration (its ``history``) and, for the features that are no subject's knob,
``core/ledger.json`` record from which release each feature is documented; the registry
(``core/subjects.py``) says what each feature is, and the probe detects every feature on
the build itself. A consumer that gates on the version string goes wrong
in both directions, so both are findings:

- ``version_feature_mismatch`` (error): the version claims the feature, the build lacks it. A
  consumer's version gate would call a knob that is not there.
- ``feature_predates_version`` (warning): the build has the feature, its version predates it. A
  consumer's version gate would leave it unused (for a determinism knob: drop determinism
  silently, the seed's real window between a merge and the version bump).

How a version claims a feature documented from release S (PEP 440 order, as consumers' gates
compare with ``packaging``):

- it claims S when ``version >= S``: ``1.28.0``, ``1.28.0.post1``, ``1.28.0+g1234`` and
  ``1.28.1.dev0`` all claim a feature of 1.28.0;
- it predates S when its release number is below S's: ``1.27.0``, ``1.27.1.dev3``;
- a pre-release or dev build of S itself (``1.28.0.dev0``, ``1.28.0rc1``) is on its way to S:
  it neither claims the feature (a gate ``>= 1.28.0`` says no) nor predates it, so it gets no
  finding either way: with the feature it is a development build ahead of its gate, without it
  a development build not yet there.

A feature the probe could not read (``None``) produces nothing; so does an unparseable version.
But a subject whose entry point the build has and cannot import, in a release the ledger says
has its feature, is an ``import_error`` of severity error (``claimed_import_errors``): whatever
the previous build of the line did, a consumer of this release would reach for it and fail.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, field_validator

from core.bounds import clip
from core.kinds import FindingKind
from core.subjects import FEATURES, LEDGER_PATH, release_history
from core.wire import Finding, Severity

MISMATCH_EFFECT = "a consumer's version gate would call a knob that is not there"
PREDATES_EFFECT = "a consumer's version gate would leave it unused and drop determinism silently"


class LedgerFeature(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    subject: str
    entry_points: tuple[str, ...]
    detect: dict[str, str]
    since: str
    has: str
    lacks: str
    source: str
    evidence: str = ""
    missing_in: tuple[str, ...] = ()  # releases after ``since`` that lacked it again
    mismatch_effect: str = MISMATCH_EFFECT
    predates_effect: str = PREDATES_EFFECT

    @field_validator("since")
    @classmethod
    def _release(cls, value: str) -> str:
        Version(value)  # raises on a typo in the ledger
        return value


@lru_cache(maxsize=4)
def load_ledger(path: Path = LEDGER_PATH) -> tuple[LedgerFeature, ...]:
    """Each registry feature with its release history, in the ledger's order.

    A feature the registry declares without history (an extension's, say) has no release to
    compare with and is left out; history for a feature the registry does not declare is refused.
    """
    declared = {f.id: f for f in FEATURES}
    history = release_history(path)
    unknown = sorted(set(history) - set(declared))
    if unknown:
        raise ValueError(f"{path}: release history for features the registry lacks: {unknown}")
    out = []
    for fid, entry in history.items():
        f = declared[fid]
        described = {
            "subject": f.subject,
            "entry_points": f.entry_points,
            "detect": dict(f.detect),
            "has": f.has,
            "lacks": f.lacks,
        }
        described.update(
            {
                k: v
                for k, v in (
                    ("mismatch_effect", f.mismatch_effect),
                    ("predates_effect", f.predates_effect),
                )
                if v
            }
        )
        out.append(LedgerFeature.model_validate({**described, **entry}))
    return tuple(out)


def claims(version: Version, since: Version) -> bool:
    return version >= since


def predates(version: Version, since: Version) -> bool:
    return Version(version.base_version).release < since.release


def ledger_findings(
    version: str,
    features: dict[str, bool | None],
    ledger: tuple[LedgerFeature, ...] | None = None,
) -> list[Finding]:
    """Findings where the reported ``version`` and the detected ``features`` disagree."""
    try:
        reported = Version(version)
    except InvalidVersion:
        return []
    out: list[Finding] = []
    for feature in ledger if ledger is not None else load_ledger():
        has = features.get(feature.id)
        if has is None:
            continue
        since = Version(feature.since)
        if not has and claims(reported, since):
            out.append(
                Finding(
                    kind=FindingKind.version_feature_mismatch,
                    severity=Severity.error,
                    subject=feature.subject,
                    message=f"reports {version} but {feature.lacks} (documented from "
                    f"{feature.since}): {feature.mismatch_effect}",
                )
            )
        elif has and predates(reported, since):
            out.append(
                Finding(
                    kind=FindingKind.feature_predates_version,
                    severity=Severity.warning,
                    subject=feature.subject,
                    message=f"reports {version} but {feature.has} (documented from "
                    f"{feature.since}): {feature.predates_effect}",
                )
            )
    return out


def claimed_import_errors(
    version: str | None,
    findings: list[Finding],
    ledger: tuple[LedgerFeature, ...] | None = None,
) -> list[Finding]:
    """``findings`` with each ``import_error`` of a subject this version should have an error."""
    try:
        reported = Version(version or "")
    except InvalidVersion:
        return findings
    out: list[Finding] = []
    for f in findings:
        feature = next(
            (
                e
                for e in (ledger if ledger is not None else load_ledger())
                if e.subject == f.subject and claims(reported, Version(e.since))
            ),
            None,
        )
        if (
            f.kind == FindingKind.import_error
            and f.severity != Severity.error
            and feature is not None
        ):
            f = f.model_copy(
                update={
                    "severity": Severity.error,
                    "message": clip(
                        f"{f.message} (reports {version}, and {feature.id} is documented from "
                        f"{feature.since})"
                    ),
                }
            )
        out.append(f)
    return out
