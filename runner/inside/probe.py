"""The probe stage: what this build offers, read from the build itself, CPU only.

Runs in the candidate's environment (``python -m runner.inside.probe --out FILE``) with the
standard library and the candidate ``cudnn`` only; it needs no GPU and no libcudnn. For every
subject of the registry it reports whether the entry point imports, whether the knob exists, its
default (as a repr string) and which method answered: ``signature`` (``inspect.signature``) or
``docstring`` (the first line of a compiled pybind11 method's ``__doc__``). It also detects every
feature of the registry, so the runner can compare what the build has with what its version
claims (``ledger.json``). Problems are findings, never a crash.

An entry point the build does not have at all (a module or attribute that does not exist in this
release) is ``not_applicable``; one the build has but that fails to import (a missing dependency,
a broken module) is an ``import_error`` finding as well.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import platform
import re
from typing import Any

from runner.inside import _io
from runner.inside.documents import CheckDoc, ErrorDoc, FindingDoc, ProbeDoc
from runner.inside.registry import FEATURES, SUBJECTS, Feature, Subject

DISTRIBUTION = "nvidia-cudnn-frontend"
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = {v: k for k, v in _OPEN.items()}


class Absent(Exception):
    """The build has no such module or attribute: not applicable, not an error."""

    def __init__(self, missing: str, cause: BaseException) -> None:
        super().__init__(f"{missing} not importable ({describe(cause)})")
        self.missing = missing
        self.cause = cause


class ImportFailed(Exception):
    """The build has the module, but importing it raised."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"{name} failed to import ({describe(cause)})")
        self.name = name
        self.cause = cause


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# A module that failed once fails the same way for every later subject: a second attempt would
# meet a half-initialised package and report a misleading error of its own.
_FAILED: dict[str, ImportFailed] = {}


def _import_root(name: str) -> Any:
    if name in _FAILED:
        raise _FAILED[name]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise Absent(name, exc) from exc
        _FAILED[name] = ImportFailed(name, exc)
    except (Exception, SystemExit) as exc:
        _FAILED[name] = ImportFailed(name, exc)
    raise _FAILED[name]


def resolve(path: str) -> Any:
    """The object at a dotted path, importing modules on the way (lazy attributes included)."""
    parts = path.split(".")
    obj: Any = _import_root(parts[0])
    current = parts[0]
    for index, part in enumerate(parts[1:], start=1):
        name = f"{current}.{part}"
        not_a_module: BaseException | None = None
        if inspect.ismodule(obj):
            if name in _FAILED:
                raise _FAILED[name]
            try:
                obj = importlib.import_module(name)
                current = name
                continue
            except ModuleNotFoundError as exc:
                if exc.name != name:
                    _FAILED[name] = ImportFailed(name, exc)
                    raise _FAILED[name] from exc
                not_a_module = exc
            except (Exception, SystemExit) as exc:
                _FAILED[name] = ImportFailed(name, exc)
                raise _FAILED[name] from exc
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            last = index == len(parts) - 1
            raise Absent(name, exc if last or not_a_module is None else not_a_module) from exc
        except (Exception, SystemExit) as exc:  # a lazy attribute whose import raised
            raise ImportFailed(name, exc) from exc
        current = name
    return obj


def split_top_level(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside brackets and quotes (``<enum.X: 0>`` counts as a bracket)."""
    parts: list[str] = []
    stack: list[str] = []
    quote: str | None = None
    start = 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN and not (
            ch == "<" and text[i - 1 : i] == " " and text[i + 1 : i + 2] == " "
        ):
            stack.append(ch)
        elif ch in _CLOSE and stack and stack[-1] == _CLOSE[ch]:
            if not (ch == ">" and text[i - 1 : i] == "-"):
                stack.pop()
        elif ch == sep and not stack:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _param_list(line: str, name: str) -> str | None:
    """The text between the parentheses of ``name(...)`` on one docstring line."""
    match = re.match(rf"^\s*(?:\d+\.\s*)?{re.escape(name)}\(", line)
    if match is None:
        return None
    depth = 0
    for i in range(match.end() - 1, len(line)):
        if line[i] in "([{":
            depth += 1
        elif line[i] in ")]}":
            depth -= 1
            if depth == 0:
                return line[match.end() : i]
    return None


def doc_parameters(doc: str | None, name: str) -> dict[str, str | None] | None:
    """Parameters and default reprs from a pybind11 docstring's signature line(s).

    pybind11 writes ``name(self, a: T, b: T = default) -> R`` as the first line; an overloaded
    function writes ``name(*args, **kwargs)`` then ``1. name(...)``, ``2. name(...)``: every
    overload's parameters are merged. None when no line carries a readable signature.
    """
    if not doc:
        return None
    found: dict[str, str | None] = {}
    lines = doc.splitlines()
    candidates = lines[:1] + [ln for ln in lines[1:] if re.match(r"^\s*\d+\.\s", ln)]
    readable = False
    for line in candidates:
        inner = _param_list(line, name)
        if inner is None:
            continue
        readable = True
        for part in split_top_level(inner, ","):
            left, eq, default = part.partition("=")
            pname = split_top_level(left, ":")[0] if ":" in left else left
            pname = pname.strip().lstrip("*")
            if pname and pname != "self":
                found.setdefault(pname, default.strip() if eq else None)
    return found if readable else None


def signature_parameters(obj: Any) -> dict[str, str | None] | None:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # builtins and pybind11 methods have no readable signature
        return None
    return {
        name: None if p.default is inspect.Parameter.empty else repr(p.default)
        for name, p in params.items()
    }


def read_parameters(obj: Any, prefer: str) -> tuple[dict[str, str | None] | None, str | None]:
    """(parameters, method that answered); the other method is the fallback."""
    name = getattr(obj, "__name__", "")
    readers = {
        "signature": lambda: signature_parameters(obj),
        "docstring": lambda: doc_parameters(getattr(obj, "__doc__", None), name),
    }
    order = [prefer] + [m for m in readers if m != prefer]
    for method in order:
        params = readers[method]()
        if params is not None:
            return params, method
    return None, None


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
        out["findings"].append(_finding("import_error", "warning", subject.name, _failed(exc)))
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
        out["check"] = _check(
            check, "not_applicable", f"no '{knob}' parameter on {entry} (read from its {method})"
        )
        return out
    default = params[knob]
    cap.update(present=True, default=default)
    out["check"] = _check(
        check,
        "pass",
        f"{entry} takes '{knob}' (default {default}, read from its {method})",
        {"method": method, "default": default},
    )
    if default is not None and default != "None":
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
        text = f"the {exc.name} package failed to import ({describe(exc.cause)})"
        if isinstance(exc.cause, OSError) and "libcudnn" in str(exc.cause):
            text += ": it loads the cuDNN library at import and this host has none"
        return text
    return f"{exc.name} is in this build but failed to import ({describe(exc.cause)})"


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
    try:
        cudnn = resolve("cudnn")
    except Absent as exc:
        unread_cudnn = f"cudnn: {exc}"
    except ImportFailed as exc:
        unread_cudnn = f"cudnn: {_failed(exc)}"
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
    env, env_unread = environment(cudnn)
    unread.extend(env_unread)
    present = sorted(name for name, cap in capabilities.items() if cap["present"])
    reason = f"probed {len(capabilities)} subjects; knobs present: " + (
        ", ".join(present) or "none"
    )
    if cudnn is None:
        reason += f" ({unread_cudnn})"
    return {
        "status": "pass",
        "reason": reason,
        "version": version,
        "module_version": getattr(cudnn, "__version__", None) if cudnn is not None else None,
        "capabilities": capabilities,
        "checks": checks,
        "findings": findings,
        "features": features,
        "environment": env,
        "unread": unread,
    }


if __name__ == "__main__":
    raise SystemExit(_io.run_stage(probe))
