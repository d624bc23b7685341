"""Feature regression: compare a build's probe with the previous build of its line.

Used by the service (which knows the line's history) and by ``fe-ci validate --previous``. The
comparison is per subject: an entry point or a knob that the previous build had and this one lacks
is ``feature_regression`` (error); a knob whose default changed is ``knob_default_changed``
(warning: a default of None follows the torch flag, False does not). An ``import_error`` is an
error when the previous build could import that subject, and a warning otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.bounds import clip
from core.kinds import FindingKind
from core.wire import Capability, Finding, Severity

IMPORT_ERROR = FindingKind.import_error


def regressions(
    previous: dict[str, Capability],
    current: dict[str, Capability],
    *,
    findings: Iterable[Finding] = (),
) -> list[Finding]:
    """What ``current`` lost against ``previous``.

    ``findings`` are the current build's own probe findings: a subject that has an
    ``import_error`` there is left to ``upgrade_import_errors`` rather than reported twice.
    A subject the current probe did not look at, or whose parameters it could not read, is not
    a regression: nothing is known about it.
    """
    failed = {f.subject for f in findings if f.kind == IMPORT_ERROR}
    out: list[Finding] = []
    for subject, before in previous.items():
        now = current.get(subject)
        if now is None or subject in failed:
            continue
        if before.importable and not now.importable:
            why = f": {now.error}" if now.error else ""
            out.append(
                _regression(
                    subject,
                    f"{before.entry_point or subject} is gone: the previous build could import "
                    f"it{why}",
                )
            )
        elif before.present and now.importable and not now.present and now.method is not None:
            was = f" (default {before.default})" if before.default is not None else ""
            out.append(
                _regression(
                    subject,
                    f"{now.entry_point or subject} lost its '{before.knob}' parameter: the "
                    f"previous build had it{was}",
                )
            )
        elif before.present and now.present and before.default != now.default:
            out.append(
                Finding(
                    kind=FindingKind.knob_default_changed,
                    severity=Severity.warning,
                    subject=subject,
                    message=f"{now.entry_point or subject}'s '{now.knob}' default changed from "
                    f"{before.default} to {now.default}",
                )
            )
    return out


def _regression(subject: str, message: str) -> Finding:
    return Finding(
        kind=FindingKind.feature_regression,
        severity=Severity.error,
        subject=subject,
        message=clip(message),
    )


def import_error_severity(subject: str | None, previous: dict[str, Capability] | None) -> Severity:
    """error when the previous build of the line could import ``subject``, else warning."""
    if subject is None or not previous:
        return Severity.warning
    before = previous.get(subject)
    return Severity.error if before is not None and before.importable else Severity.warning


def upgrade_import_errors(
    findings: Iterable[Finding], previous: dict[str, Capability] | None
) -> list[Finding]:
    """``findings`` with every ``import_error`` set to the severity the line's history gives."""
    out: list[Finding] = []
    for f in findings:
        if f.kind == IMPORT_ERROR and import_error_severity(f.subject, previous) == Severity.error:
            f = f.model_copy(
                update={
                    "severity": Severity.error,
                    "message": f"{f.message} (the previous build of this line imported it)",
                }
            )
        out.append(f)
    return out
