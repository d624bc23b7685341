"""The build's determinism surface, read from its source: every public knob, never the version.

Standard library only (and, for the compiled graph's methods, the candidate's ``cudnn``). Three
readers, each bounded in time and size:

- ``ast`` over the installed package's ``.py`` files, never importing them: every public function
  or class (one that a package ``__init__`` on its module's path names: an import, ``__all__``, or
  a lazy-export string) with a parameter whose name contains ``determin``, and its default as
  source text; every function, public or not, whose source calls
  ``torch.are_deterministic_algorithms_enabled()`` (it follows the torch flag);
- the schemas of the torch ops the package defines under the ``cudnn`` namespace
  (``Library("cudnn", ...).define("name(...)")`` and ``custom_op("cudnn::name")``), read from the
  source string, so no op is registered and no GPU is needed;
- the first docstring line of each public method of the compiled graph class (``pygraph`` /
  ``backend_graph``), which carries pybind11's signature.

Source that does not parse is named in ``unparsed`` (the probe makes it a finding), never a crash.
A package too big to read within the bounds is read as far as the bounds allow and says so
(``truncated``). Names and defaults are cut to ``NAME_CHARS`` / ``DEFAULT_CHARS`` with control
characters replaced: whatever shows them escapes them again for its medium.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from core import surface
from runner.inside.documents import FindingDoc
from runner.inside.introspect import doc_parameters

NEEDLE = "determin"
TORCH_FLAG = "are_deterministic_algorithms_enabled"
FLAG_DEFAULT = "torch.are_deterministic_algorithms_enabled()"
NAME_CHARS = 200
DEFAULT_CHARS = 120
MAX_FILES = 20_000
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_KNOBS = 400
MAX_UNPARSED = 50
SECONDS = 120.0  # a loaded 2-core host reads 1.32.0 (1,066 files) in about 6 s
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SCHEMA = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\((.*)\)\s*->", re.S)
# A module holding none of these holds no flag read and no op schema; one without the needle
# holds no knob.
_ALWAYS = (TORCH_FLAG.encode(), b".define(", b"custom_op(")
_NEEDLE = NEEDLE.encode()
_TOP_LEVEL = re.compile(rb"^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", re.M)


def clean(text: str, limit: int) -> str:
    """``text`` on one line, control characters replaced, cut to ``limit`` characters."""
    text = _CONTROL.sub("?", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Reader:
    def __init__(self, root: Path, deadline: float) -> None:
        self.root = root
        self.deadline = deadline
        self.files = 0
        self.unparsed: list[str] = []
        self.truncated = ""
        self.exports: dict[str, set[str]] = {}  # package -> names its __init__ names
        # (module, name) -> the public path a package elsewhere re-exports it under
        # (``cudnn.ops`` lazily exports ``qsa_select_forward`` from ``cudnn.QSA.selection``)
        self.reexports: dict[tuple[str, str], str] = {}
        self.trees: list[tuple[str, ast.Module, bytes]] = []  # module, tree, its source

    def module_of(self, path: Path) -> str:
        parts = list(path.relative_to(self.root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        return ".".join(parts)

    def exported_near(self, module: str) -> set[str]:
        """The names the ``__init__`` of each package on the module's path exports."""
        parts = module.split(".")
        out: set[str] = set()
        for end in range(1, len(parts)):
            out |= self.exports.get(".".join(parts[:end]), set())
        return out

    def wanted(self, module: str, data: bytes) -> bool:
        """Whether a module (not an ``__init__``) can hold something a reader looks for: a flag
        read or an op schema, or a knob on a top-level name a package on its path exports.
        Only these are parsed: kernel modules, most of a release, are not."""
        if any(w in data for w in _ALWAYS):
            return True
        if _NEEDLE not in data:
            return False
        names = {m.decode() for m in _TOP_LEVEL.findall(data)}
        if any((module, n) in self.reexports for n in names):
            return True
        return not names.isdisjoint(self.exported_near(module))

    def read(self) -> None:
        # every __init__ first: which names are public decides which modules need parsing
        paths = sorted(self.root.rglob("*.py"), key=lambda p: (p.name != "__init__.py", p))
        for path in paths:
            if time.monotonic() > self.deadline:
                self.truncated = f"time bound ({SECONDS:.0f} s) reached after {self.files} files"
                return
            if self.files >= MAX_FILES:
                self.truncated = f"file bound ({MAX_FILES}) reached"
                return
            self.files += 1
            rel = clean(str(path.relative_to(self.root.parent)), NAME_CHARS)
            try:
                if path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
                    raise ValueError(f"not a regular file under {MAX_FILE_BYTES} bytes")
                data = path.read_bytes()
                module = self.module_of(path)
                if path.name != "__init__.py" and not self.wanted(module, data):
                    continue  # nothing here a reader looks for: not parsed
                tree = ast.parse(data, filename=rel)
            except (SyntaxError, ValueError, RecursionError, MemoryError, OSError) as exc:
                if len(self.unparsed) < MAX_UNPARSED:
                    self.unparsed.append(clean(f"{rel}: {type(exc).__name__}: {exc}", 400))
                continue
            if path.name == "__init__.py":
                self.exports[module] = _named(tree)
                for source, name, shown in _reexported(tree, module):
                    held = self.reexports.get((source, name))
                    public = f"{module}.{shown}"
                    if held is None or len(public) < len(held):
                        self.reexports[(source, name)] = public
            self.trees.append((module, tree, data))

    def public_path(self, module: str, name: str) -> str | None:
        """The shortest ``package.name`` a package ``__init__`` exports it under: one on the
        module's path, or one that names the module itself."""
        found = [self.reexports[(module, name)]] if (module, name) in self.reexports else []
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            package = ".".join(parts[:end])
            if name in self.exports.get(package, ()):
                found.append(f"{package}.{name}")
                break
        return min(found, key=len) if found else None


def _absolute(source: str, package: str) -> str:
    """``.api`` in package ``cudnn.sdpa`` is ``cudnn.sdpa.api``."""
    if not source.startswith("."):
        return source
    level = len(source) - len(source.lstrip("."))
    base = package.split(".")[: max(len(package.split(".")) - level + 1, 0)]
    rest = source.lstrip(".")
    return ".".join([*base, *([rest] if rest else [])])


def _reexported(tree: ast.Module, package: str) -> Iterator[tuple[str, str, str]]:
    """(module, name, name shown) for every ``from M import name`` and every lazy-export pair
    ``("M", "name")`` of a package ``__init__``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            source = _absolute("." * node.level + node.module, package)
            for alias in node.names:
                if alias.name != "*" and not (alias.asname or alias.name).startswith("_"):
                    yield source, alias.name, alias.asname or alias.name
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2:
            first, second = node.elts
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and isinstance(second, ast.Constant)
                and isinstance(second.value, str)
                and second.value.isidentifier()
                and all(p.isidentifier() for p in first.value.lstrip(".").split(".") if p)
            ):
                yield _absolute(first.value, package), second.value, second.value


def _named(tree: ast.Module) -> set[str]:
    """Every name a package ``__init__`` exports: imports, definitions, and identifier strings
    (``__all__`` and the lazy-export tables both spell names as strings)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.isidentifier()
        ):
            names.add(node.value)
    names.update(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef))
    return {n for n in names if not n.startswith("_")}


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[str, str | None]]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(
        a.defaults
    )
    pairs = list(zip(positional, defaults, strict=True)) + list(
        zip(a.kwonlyargs, a.kw_defaults, strict=True)
    )
    for arg, default in pairs:
        if NEEDLE in arg.arg.lower() and not arg.arg.startswith("_"):
            yield arg.arg, None if default is None else _source(default)


def _source(node: ast.AST) -> str:
    try:
        return clean(ast.unparse(node), DEFAULT_CHARS)
    except (ValueError, RecursionError):
        return "?"


def _reads_flag(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == TORCH_FLAG)
        or (isinstance(n, ast.Name) and n.id == TORCH_FLAG)
        for n in ast.walk(node)
    )


def _callables(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, function) of every top-level function and every method of a top-level
    class."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}.{item.name}", item


def _knob(entry: str, knob: str, default: str | None, kind: str, method: str) -> dict[str, Any]:
    return {
        "entry_point": clean(entry, NAME_CHARS),
        "knob": clean(knob, NAME_CHARS),
        "default": default,
        "kind": kind,
        "method": method,
    }


def _from_source(reader: _Reader) -> Iterator[dict[str, Any]]:
    for module, tree, data in reader.trees:
        flag = TORCH_FLAG.encode() in data
        for qualname, fn in _callables(tree):
            owner, _, member = qualname.partition(".")
            public = reader.public_path(module, owner) if not owner.startswith("_") else None
            if public and (not member.startswith("_") or member in ("__init__", "__call__")):
                # a class's constructor and __call__ speak for the class; a public method is
                # its own entry point (``Class.execute``)
                entry = f"{public}.{member}" if member and not member.startswith("_") else public
                for name, default in _params(fn):
                    yield _knob(entry, name, default, "parameter", "ast")
            if flag and _reads_flag(fn):
                reader_of = f"{public}.{member}" if public and member else public
                yield _knob(reader_of or f"{module}.{qualname}", "torch flag", FLAG_DEFAULT,
                            "torch_flag", "ast")  # fmt: skip
        if b".define(" in data or b"custom_op(" in data:
            yield from _op_schemas(tree, module)


def _op_schemas(tree: ast.Module, module: str) -> Iterator[dict[str, Any]]:
    """Knobs of the ops this module defines, named ``torch.ops.cudnn.<op> [<module>]``: an op
    that moves to another module is a different definition (its schema is the new module's)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        first = node.args[0] if node.args else None
        if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            continue
        if node.func.attr == "define":
            yield from _schema_knobs(first.value, module)
        elif node.func.attr == "custom_op" and first.value.startswith("cudnn::"):
            yield from _schema_knobs(first.value.split("::", 1)[1] + "() ->", module)


def _schema_knobs(schema: str, module: str) -> Iterator[dict[str, Any]]:
    match = _SCHEMA.match(schema[:20_000])
    if match is None:
        return
    op, args = match.groups()
    for part in args.split(","):
        left, eq, default = part.partition("=")
        words = left.split()
        if words and NEEDLE in words[-1].lower():
            yield _knob(f"torch.ops.cudnn.{op} [{module}]", words[-1],
                        clean(default.strip(), DEFAULT_CHARS) if eq else None,
                        "op_schema", "schema")  # fmt: skip


def _from_compiled(compiled: Any) -> Iterator[dict[str, Any]]:
    """The compiled graph class's methods whose pybind11 signature line names a knob."""
    prefix = f"cudnn._compiled_module.{getattr(compiled, '__name__', 'pygraph')}"
    for name in sorted(dir(compiled))[:2000]:
        if name.startswith("_"):
            continue
        doc = getattr(getattr(compiled, name, None), "__doc__", None)
        if not isinstance(doc, str) or NEEDLE not in doc[:20_000]:
            continue
        for param, default in (doc_parameters(doc[:20_000], name) or {}).items():
            if NEEDLE in param.lower():
                yield _knob(f"{prefix}.{name}", param,
                            None if default is None else clean(default, DEFAULT_CHARS),
                            "parameter", "docstring")  # fmt: skip


def discover(
    root: Path | None, compiled: Any | None = None, *, seconds: float = SECONDS
) -> dict[str, Any]:
    """The surface of the package at ``root`` (and of the compiled graph class ``compiled``)."""
    start = time.monotonic()
    knobs: dict[tuple[str, str], dict[str, Any]] = {}
    reader = _Reader(root, start + seconds) if root is not None else None
    found: list[Iterator[dict[str, Any]]] = []
    if reader is not None:
        reader.read()
        found.append(_from_source(reader))
    if compiled is not None:
        found.append(_from_compiled(compiled))
    truncated = reader.truncated if reader else ""
    for source in found:
        for knob in source:
            if len(knobs) >= MAX_KNOBS:
                truncated = truncated or f"knob bound ({MAX_KNOBS}) reached"
                break
            knobs.setdefault((knob["entry_point"], knob["knob"]), knob)
    return {
        "knobs": sorted(knobs.values(), key=lambda k: (k["entry_point"], k["knob"])),
        "files": reader.files if reader else 0,
        "unparsed": reader.unparsed if reader else [],
        "truncated": truncated,
        "seconds": round(time.monotonic() - start, 3),
    }


def package_root(module: Any | None) -> Path | None:
    """Where the candidate's ``cudnn`` package lives (its first ``__path__`` entry)."""
    paths = getattr(module, "__path__", None)
    try:
        first = next(iter(paths)) if paths is not None else None
    except (StopIteration, TypeError):
        return None
    return Path(first) if isinstance(first, str) else None


def compiled_graph(module: Any | None) -> Any | None:
    compiled = getattr(module, "_compiled_module", None)
    for name in ("backend_graph", "pygraph"):
        found = getattr(compiled, name, None)
        if found is not None:
            return found
    return None


def probe_surface(module: Any | None) -> tuple[dict[str, Any], list[FindingDoc], list[str]]:
    """(the surface document, its findings, what could not be read) of the imported ``cudnn``."""
    if module is None:
        return (
            {"knobs": [], "files": 0, "unparsed": [], "truncated": "", "seconds": 0.0},
            [],
            ["surface: not read, the cudnn package did not import"],
        )
    try:
        read = discover(package_root(module), compiled_graph(module))
    except Exception as exc:  # a reader's bug must not cost the rest of the probe
        why = f"surface: the reader raised {type(exc).__name__}: {clean(str(exc), 400)}"
        empty = {"knobs": [], "files": 0, "unparsed": [], "truncated": why, "seconds": 0.0}
        return empty, [cast(FindingDoc, surface.finding(surface.TRUNCATED, "warning", why))], [why]
    findings = [cast(FindingDoc, f) for f in surface.uncovered(read["knobs"])]
    if read["unparsed"]:
        findings.append(
            cast(
                FindingDoc,
                surface.finding(
                    surface.UNPARSABLE,
                    "warning",
                    f"{len(read['unparsed'])} source file(s) of the build do not parse, so "
                    f"their knobs are unknown: {'; '.join(read['unparsed'][:5])}",
                ),
            )
        )
    if read["truncated"]:
        findings.append(
            cast(
                FindingDoc,
                surface.finding(
                    surface.TRUNCATED,
                    "warning",
                    f"the surface was read only in part ({read['truncated']}): knobs past "
                    "the bound are unknown",
                ),
            )
        )
    return read, findings, []
