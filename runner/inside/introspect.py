"""Reading a build's entry points without running them: import by dotted path, read parameters.

Standard library and the candidate only. ``resolve`` imports what a dotted path names and tells a
build that does not have it (``Absent``: not applicable) from one whose module fails to import
(``ImportFailed``: a finding). ``read_parameters`` reads a callable's parameters and their default
reprs from ``inspect.signature`` or, for compiled pybind11 methods that have no readable
signature, from the first line(s) of their ``__doc__``. The probe and the subjects' knob check
(``subjects/base.py``) both read a build this way.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from typing import Any

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


TORCH_FLAG = "torch_flag"  # the knob of an entry point that follows the torch flag
FLAG_READER = "are_deterministic_algorithms_enabled"
FLAG_DEFAULT = "torch.are_deterministic_algorithms_enabled()"


def torch_flag_parameters(obj: Any) -> dict[str, str | None] | None:
    """``{TORCH_FLAG: FLAG_DEFAULT}`` when the callable's own source reads
    ``torch.are_deterministic_algorithms_enabled()``, ``{}`` when it does not, None when its
    source cannot be read or parsed (compiled, or not Python)."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    reads = any(
        (isinstance(n, ast.Attribute) and n.attr == FLAG_READER)
        or (isinstance(n, ast.Name) and n.id == FLAG_READER)
        for n in ast.walk(tree)
    )
    return {TORCH_FLAG: FLAG_DEFAULT} if reads else {}


def read_parameters(obj: Any, prefer: str) -> tuple[dict[str, str | None] | None, str | None]:
    """(parameters, method that answered); the other method is the fallback. ``torch_flag``
    reads the source for the torch flag and has no fallback: a signature cannot say it."""
    if prefer == TORCH_FLAG:
        found = torch_flag_parameters(obj)
        return found, (TORCH_FLAG if found is not None else None)
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
