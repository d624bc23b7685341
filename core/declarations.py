"""Reading the subjects' declarations from their modules' source, never importing them.

A subject is one module, ``runner/inside/subjects/<name>.py``, whose top level holds
``DECLARATION = Subject(...)`` with keyword arguments that are Python literals (strings, numbers,
booleans, None, tuples, lists and dicts of them). That module also holds the subject's harness,
which imports torch and the candidate; the runner imports it inside a candidate's environment.
Everything else (the service, ``fe-ci configs``, the probe before any candidate import, the
coverage) reads only the declaration, from the source by ``ast``: no module code runs, so no
torch is needed and nothing but fe-ci's own literal text is evaluated.

Standard library only: a candidate stage gets this module with core's other standard-library
part. ``docs/adding-a-subject.md`` documents the format.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The folder the registry scans: beside core/ in the checkout, in an installed package and in a
# candidate stage's private copy of the source alike.
SUBJECTS_DIR = Path(__file__).resolve().parents[1] / "runner" / "inside" / "subjects"
ASSIGNED = "DECLARATION"
CALLED = "Subject"
MAX_SOURCE_BYTES = 1 << 20  # a subject's module; far above any real one


class DeclarationError(ValueError):
    """A subject module's declaration cannot be read: the message names the file and why."""


def declaration_fields(path: Path) -> dict[str, Any] | None:
    """The keyword arguments of ``path``'s ``DECLARATION = Subject(...)``, or None where the
    module declares no subject (a helper such as ``base.py``)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DeclarationError(f"{path}: cannot be read ({exc.strerror})") from exc
    if ASSIGNED.encode() not in raw:
        return None
    if len(raw) > MAX_SOURCE_BYTES:
        raise DeclarationError(f"{path}: {len(raw)} bytes, over {MAX_SOURCE_BYTES}")
    try:
        tree = ast.parse(raw, filename=str(path))
    except (SyntaxError, ValueError) as exc:
        raise DeclarationError(f"{path}: does not parse ({exc})") from exc
    found = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == [ASSIGNED]
    ]
    if not found:
        return None
    if len(found) > 1:
        raise DeclarationError(f"{path}: {ASSIGNED} is assigned {len(found)} times; once only")
    call = found[0]
    if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == CALLED):
        raise DeclarationError(f"{path}: {ASSIGNED} must be {CALLED}(...) with keyword arguments")
    if call.args:
        raise DeclarationError(f"{path}: {CALLED}(...) takes keyword arguments only")
    fields: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise DeclarationError(f"{path}: {CALLED}(**...) is not a declaration; name each field")
        try:
            fields[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
            raise DeclarationError(
                f"{path}: {kw.arg}= is not a literal (line {kw.value.lineno}); a declaration "
                "holds plain values only"
            ) from exc
    return fields


def modules(folder: Path) -> Iterator[Path]:
    """The subject modules of ``folder`` in name order (or ``folder`` itself, one file)."""
    if folder.is_file():
        yield folder
        return
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_"):
            yield path
