"""The probe stage: what this build offers, read from the build itself, CPU only.

Runs in the candidate's environment (``python -m runner.inside.probe --out FILE``) with the
standard library and the candidate ``cudnn`` only; it needs no GPU and no libcudnn. For every
subject of the registry it reports whether the entry point imports, whether the knob exists, its
default (as a repr string) and which method answered: ``signature`` (``inspect.signature``) or
``docstring`` (the first line of a compiled pybind11 method's ``__doc__``). It also detects every
feature of the registry, so the runner can compare what the build has with what its version
claims (each declaration's ``history``, and ``ledger.json``). Problems are findings, never a crash.

An entry point the build does not have at all (a module or attribute that does not exist in this
release) is ``not_applicable``; one the build has but that fails to import (a missing dependency,
a broken module) is an ``import_error`` finding as well.

A build whose ``cudnn`` package itself does not import offers nothing: that is an ``import_error``
of severity error (subject none) and the stage fails, so the build can never pass with every
subject "not applicable" (unless a subject an extension keeps outside the package imports).
Where the import failed only because this host has no cuDNN library (releases before 1.15.0 load
it at import), nothing about the build could be read here: the stage is an ``error``, which says
so.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import platform
import re
from typing import Any

from core.kinds import FindingKind
from core.subjects import FEATURES, SUBJECTS, Feature, Subject
from runner.inside import _io, discovery, loaded
from runner.inside.documents import CheckDoc, ErrorDoc, FindingDoc, ProbeDoc
from runner.inside.introspect import Absent, ImportFailed, describe, read_parameters, resolve

DISTRIBUTION = "nvidia-cudnn-frontend"
MESSAGE_CHARS = 1000  # of an exception the candidate raised, in a finding or a reason
SURFACE_ELSEWHERE = "the surface is not read here: the build's cpu job reads the same source"


def _first_entry_point(paths: list[str]) -> tuple[str, Any]:
    """The first entry point this build has; Absent only when it has none of them."""
    absent: Absent | None = None
    for path in paths:
        try:
            return path, resolve(path)
        except Absent as exc:
            absent = absent or exc
    assert absent is not None
    raise absent


def probe_subject(subject: Subject) -> dict[str, Any]:
    """Capability, check, findings and unread notes for one subject."""
    knob = subject.knob
    check = f"{subject.name}.{knob}"
    cap: dict[str, Any] = {
        "importable": False,
        "knob": knob,
        "present": False,
        "default": None,
        "method": None,
        "error": None,
        "entry_point": subject.entry_point,
    }
    out: dict[str, Any] = {"capability": cap, "findings": [], "unread": []}
    try:
        entry, obj = _first_entry_point(list(subject.entry_points))
    except Absent as exc:
        cap["error"] = describe(exc.cause)
        out["check"] = _check(check, "not_applicable", f"{subject.name}: {exc}")
        return out
    except ImportFailed as exc:
        cap["error"] = describe(exc.cause)
        out["check"] = _check(check, "not_applicable", f"{subject.name}: {exc}")
        out["findings"].append(
            _finding(FindingKind.import_error, "warning", subject.name, _failed(exc))
        )
        return out
    cap.update(importable=True, entry_point=entry)
    params, method = read_parameters(obj, subject.probe_method)
    cap["method"] = method
    if params is None:
        why = f"{entry}: neither inspect.signature nor __doc__ names its parameters"
        out["unread"].append(f"{subject.name}: {why}")
        out["check"] = _check(check, "not_applicable", f"{subject.name}: could not read {why}")
        out["findings"].append(
            _finding(
                "knob_unreadable",
                "warning",
                subject.name,
                f"could not tell whether {entry} takes '{knob}': {why}",
            )
        )
        return out
    if knob not in params:
        why = f"no '{knob}' parameter on {entry} (read from its {method})"
        if method == "torch_flag":
            why = f"{entry} does not read torch.are_deterministic_algorithms_enabled() (its source)"
        out["check"] = _check(check, "not_applicable", why)
        return out
    default = params[knob]
    cap.update(present=True, default=default)
    said = f"{entry} takes '{knob}' (default {default}, read from its {method})"
    if method == "torch_flag":
        said = f"{entry} reads {default} (read from its source)"
    out["check"] = _check(
        check,
        "pass",
        said,
        {"method": method, "default": default},
    )
    if default is not None and default != "None" and subject.probe_method != "torch_flag":
        out["findings"].append(
            _finding(
                "default_ignores_torch_flag",
                "info",
                subject.name,
                f"{entry}'s '{knob}' defaults to {default}, not None: it does not follow "
                f"torch.use_deterministic_algorithms, so a consumer must pass {knob}=True itself",
            )
        )
    return out


def _failed(exc: ImportFailed) -> str:
    if "." not in exc.name:
        text = f"the {exc.name} package failed to import ({_said(exc.cause)})"
        if _no_library(exc.cause):
            text += ": it loads the cuDNN library at import and this host has none"
        return text
    return f"{exc.name} is in this build but failed to import ({_said(exc.cause)})"


def _said(exc: BaseException) -> str:
    """An exception the candidate raised, as a line of a report: its type and message, cut."""
    text = describe(exc)
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def _no_library(exc: BaseException) -> bool:
    """The host lacks libcudnn, which the package loads at import: the host's gap, not a defect
    of the build."""
    return isinstance(exc, OSError) and "libcudnn" in str(exc)


def _unimportable(exc: Absent | ImportFailed) -> tuple[str, str, FindingDoc | None]:
    """(status, reason, finding) of a probe whose ``import cudnn`` failed."""
    if isinstance(exc, ImportFailed) and _no_library(exc.cause):
        return "error", f"nothing could be read on this host: {_failed(exc)}", None
    if isinstance(exc, Absent):
        why = f"there is no cudnn package in this environment ({_said(exc.cause)})"
    else:
        why = f"import cudnn raised {_said(exc.cause)}"
    finding = _finding(
        FindingKind.import_error,
        "error",
        None,
        f"{why}: the build offers nothing a consumer can use",
    )
    return "fail", f"the candidate is unusable: {why}", finding


def detect_feature(feature: Feature) -> tuple[bool | None, str | None]:
    """(True/False/None, why it could not be read); None means unknown, never 'absent'."""
    fid = feature.id
    try:
        entry, obj = _first_entry_point(list(feature.entry_points))
    except Absent:
        return False, None
    except ImportFailed as exc:
        return None, f"feature {fid}: {exc}"
    detect = feature.detect
    if detect["method"] == "parameter":
        params, _ = read_parameters(obj, detect.get("read", "signature"))
        if params is None:
            return None, f"feature {fid}: the parameters of {entry} are unreadable"
        return detect["parameter"] in params, None
    if detect["method"] == "torch_flag":
        params, _ = read_parameters(obj, "torch_flag")
        if params is None:
            return None, f"feature {fid}: the source of {entry} is unreadable"
        return bool(params), None
    if detect["method"] == "doc_pattern":
        doc = getattr(obj, "__doc__", None)
        if not doc:
            return None, f"feature {fid}: {entry} has no docstring"
        return re.search(detect["pattern"], doc) is not None, None
    return None, f"feature {fid}: unknown detection method {detect['method']!r}"


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def environment(cudnn: Any | None) -> tuple[dict[str, Any], list[str]]:
    unread: list[str] = []
    backend: str | None = None
    before = loaded.loaded_libcudnn()
    if cudnn is not None:
        try:  # loads libcudnn: absent on a CPU-only host
            backend = str(cudnn.backend_version())
        except (Exception, SystemExit) as exc:
            unread.append(f"cuDNN backend version: the library did not load ({describe(exc)})")
    env = {
        "python": platform.python_version(),
        "torch": _dist_version("torch"),  # read from metadata: importing torch is not needed
        "cutlass_dsl": _dist_version("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base"),
        "cudnn_backend": backend,
        "libcudnn": loaded.by_loader(before, loaded.loaded_libcudnn()),
    }
    return env, unread


def _check(name: str, status: str, detail: str, metrics: dict[str, Any] | None = None) -> CheckDoc:
    return {"name": name, "status": status, "detail": detail, "metrics": metrics or {}}


def _finding(kind: str, severity: str, subject: str | None, message: str) -> FindingDoc:
    return {"kind": kind, "severity": severity, "subject": subject, "message": message}


def _torch_unimportable() -> str | None:
    """Why torch does not import here, or None. The environment owes the candidate torch: without
    it every import below fails for a reason that is not the build's."""
    try:
        importlib.import_module("torch")
    except (Exception, SystemExit) as exc:
        return describe(exc)
    return None


def probe(params: dict[str, Any]) -> ProbeDoc | ErrorDoc:
    # The runner says when the environment is one it made to reuse the host's torch; elsewhere (a
    # bare interpreter given to --preinstalled) torch may be absent and the probe reports the rest.
    torch_missing = _torch_unimportable()
    if torch_missing and params.get("expect_torch"):
        return {
            "status": "error",
            "reason": f"torch does not import in the candidate's environment ({torch_missing}): "
            "the environment is broken, so nothing can be said about the build",
            "checks": [],
            "findings": [],
        }
    unread: list[str] = [f"torch: {torch_missing}"] if torch_missing else []
    version = _dist_version(DISTRIBUTION)
    if version is None:
        unread.append(f"distribution version: no {DISTRIBUTION} metadata in this environment")
    cudnn: Any | None = None
    unread_cudnn = ""
    failed: Absent | ImportFailed | None = None
    try:
        cudnn = resolve("cudnn")
    except (Absent, ImportFailed) as exc:
        unread_cudnn = f"cudnn: {exc}" if isinstance(exc, Absent) else f"cudnn: {_failed(exc)}"
        failed = exc
    if unread_cudnn:
        unread.append(unread_cudnn)
    capabilities: dict[str, Any] = {}
    checks: list[CheckDoc] = []
    findings: list[FindingDoc] = []
    for subject in SUBJECTS.values():
        got = probe_subject(subject)
        capabilities[subject.name] = got["capability"]
        checks.append(got["check"])
        findings.extend(got["findings"])
        unread.extend(got["unread"])
    features: dict[str, bool | None] = {f.id: None for f in FEATURES}
    if cudnn is None:
        unread.append("features: none detected, the cudnn package did not import")
    else:
        for feature in FEATURES:
            features[feature.id], why = detect_feature(feature)
            if why:
                unread.append(why)
    reads_surface = bool(params.get("surface", True))
    if reads_surface:
        read, surface_findings, surface_unread = discovery.probe_surface(cudnn)
        findings.extend(surface_findings)
        unread.extend(surface_unread)
    else:  # the build's CPU job reads it: the same wheel's source
        read = {"knobs": [], "files": 0, "unparsed": [], "truncated": "", "seconds": 0.0}
        unread.append(f"surface: {SURFACE_ELSEWHERE}")
    env, env_unread = environment(cudnn)
    unread.extend(env_unread)
    present = sorted(name for name, cap in capabilities.items() if cap["present"])
    reason = f"probed {len(capabilities)} subjects; knobs present: " + (
        ", ".join(present) or "none"
    )
    status = "pass"
    if failed is not None and not any(cap["importable"] for cap in capabilities.values()):
        # nothing to offer: never a build that passes with every subject "not applicable" (a
        # subject an extension keeps outside the cudnn package may still import without it)
        status, reason, finding = _unimportable(failed)
        findings[:0] = [finding] if finding else []
    elif cudnn is None:
        reason += f" ({unread_cudnn})"
    if not reads_surface:
        reason += f"; {SURFACE_ELSEWHERE}"
    return {
        "status": status,
        "reason": reason,
        "version": version,
        "module_version": getattr(cudnn, "__version__", None) if cudnn is not None else None,
        "capabilities": capabilities,
        "checks": checks,
        "findings": findings,
        "features": features,
        "surface": read["knobs"],
        "surface_read": {k: v for k, v in read.items() if k != "knobs"},
        "environment": env,
        "unread": unread,
    }


if __name__ == "__main__":
    _io.main(probe)
