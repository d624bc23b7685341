"""Compile-only runs of the subjects whose sm_100a kernels compile without that GPU, reused per key.

A subject skipped for want of an sm_100 GPU is compiled for sm_100a in a fresh process
(``python -m runner.inside.subjects.base``, CPU only: the arch is fixed at import). ``start``
launches that process at the beginning of the determinism stage, so the compiles of all such
subjects run concurrently with each other and with the GPU subjects; ``collect`` waits for it at
the end, bounded by the same timeout as before.

The result is kept in the stage's compile cache directory (``compile-only/<subject>-<arch>.json``),
which the runner publishes under the stage's compile cache key. A later stage with the same key,
that is byte-identical kernel sources, DSL, subject definitions, torch and Python, reads it instead
of compiling again, and its metrics say ``reused`` and from which key and when. Only ``pass`` and
``fail`` are kept: a compile's outcome is a function of the key's inputs; a harness error or a
timeout is not. ``docs/determinism.md`` says why this is as safe as the compiled-kernel cache.

"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from core.kinds import FindingKind
from core.subjects import SUBJECTS
from runner.inside._io import write_json_atomic
from runner.inside.documents import CheckDoc, FindingDoc
from runner.inside.subjects.base import COMPILE_ARCH

# Subjects whose kernels the CuTe DSL can compile for sm_100a on a host without such a GPU.
COMPILE_ONLY = tuple(name for name, s in SUBJECTS.items() if s.compile_only)
SUBDIR = "compile-only"
# The module the subprocess runs. Tests point it at a double (they have no DSL to compile with).
WORKER = "runner.inside.subjects.base"
# the folder that holds ``runner``: the worker runs in a temporary folder, so it is put on its path
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
MAX_DOC_BYTES = 256 << 10  # a kept result is a few hundred bytes; anything larger is not one
KEPT = ("pass", "fail")


@dataclass
class Pending:
    """One compile-only run: a process under way, or a result already known (reused or failed)."""

    name: str
    started: float  # time.monotonic()
    deadline: float
    proc: subprocess.Popen[bytes] | None = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    log: IO[bytes] | None = None
    doc: dict[str, Any] | None = None

    def stop(self) -> None:
        """Kill the process if it still runs (the arms it forked die with it) and drop its
        directory (idempotent)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # its arms go with it (``runner.inside.forked``)
            self.proc.wait()
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def cache_file(cache_dir: str | Path, name: str) -> Path:
    return Path(cache_dir) / SUBDIR / f"{name}-{COMPILE_ARCH}.json"


def _kept(path: Path, name: str, key: str) -> dict[str, Any] | None:
    """The result a stage of this key kept, if it is one: bounded, a JSON object, ours."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_DOC_BYTES:
            return None
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("status") not in KEPT:
        return None
    if doc.get("subject") != name or doc.get("key") != key or doc.get("arch") != COMPILE_ARCH:
        return None
    return doc


def start(
    name: str, *, cache_dir: str | None, key: str | None, timeout_s: float = 900.0
) -> Pending:
    """Reuse the key's kept result, or launch the compile in the background."""
    now = time.monotonic()
    pending = Pending(name=name, started=now, deadline=now + timeout_s)
    if cache_dir and key and (kept := _kept(cache_file(cache_dir, name), name, key)):
        stored = {k: kept.pop(k, None) for k in ("key", "stored_at", "wall_s")}
        kept.pop("subject", None)
        pending.doc = {
            **kept,
            "reused": True,
            "reused_from": {
                "key": stored["key"],
                "file": f"{SUBDIR}/{cache_file(cache_dir, name).name}",
                "stored_at": stored["stored_at"],
                "wall_s": stored["wall_s"],
            },
        }
        return pending
    pending.tmp = tempfile.TemporaryDirectory(prefix="fe-ci-compile-")
    tmp = Path(pending.tmp.name)
    (tmp / "params.json").write_text(json.dumps({"subject": name}))
    env = dict(os.environ, CUTE_DSL_ARCH=COMPILE_ARCH, CUTE_DSL_KEEP="ptx,cubin")
    # flex attention's persistent cache would hand back a kernel an earlier compile exported
    # (nothing compiled, nothing to show) and keep this one's sm_100a kernels beside the GPU's
    env["FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED"] = "0"
    env.update(CUTE_DSL_DUMP_DIR=str(tmp), CUDA_VISIBLE_DEVICES="")
    path = [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(path)
    cmd = [sys.executable, "-m", WORKER, "--in", str(tmp / "params.json")]
    pending.log = (tmp / "output.log").open("wb")  # a file, not a pipe: nobody reads it meanwhile
    try:
        pending.proc = subprocess.Popen(
            [*cmd, "--out", str(tmp / "result.json")],
            env=env,
            cwd=tmp,  # the DSL writes its kept PTX and cubin into the working folder
            stdout=pending.log,
            stderr=subprocess.STDOUT,
        )
    except OSError as exc:
        pending.doc = {"status": "error", "reason": f"could not start: {exc}"}
        pending.stop()
    return pending


def _finished(pending: Pending) -> dict[str, Any]:
    assert pending.proc is not None and pending.tmp is not None
    try:
        code = pending.proc.wait(timeout=max(pending.deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        timeout_s = pending.deadline - pending.started
        return {"status": "error", "reason": f"compile-only timed out after {timeout_s:g} s"}
    out = Path(pending.tmp.name) / "result.json"
    if not out.is_file():
        if pending.log is not None:
            pending.log.flush()
        raw = (Path(pending.tmp.name) / "output.log").read_bytes()[-1500:]
        return {"status": "error", "reason": f"exit {code}: {raw.decode(errors='replace')}"}
    try:
        doc = json.loads(out.read_bytes()[:MAX_DOC_BYTES])
    except ValueError as exc:
        return {"status": "error", "reason": f"exit {code}: the result is not JSON ({exc})"}
    if not isinstance(doc, dict):
        return {"status": "error", "reason": f"exit {code}: the result is not an object"}
    return doc


def collect(pending: Pending, *, cache_dir: str | None, key: str | None) -> dict[str, Any]:
    """The result, with ``wall_s`` (this stage's wait, subprocess included) and ``reused``.

    A fresh ``pass`` or ``fail`` is kept in the cache directory for the next stage of ``key``.
    """
    try:
        doc = pending.doc if pending.doc is not None else _finished(pending)
    finally:
        pending.stop()
    wall_s = round(time.monotonic() - pending.started, 3)
    doc = {**doc, "wall_s": wall_s}
    doc.setdefault("reused", False)
    if not doc["reused"] and cache_dir and key and doc.get("status") in KEPT:
        path = cache_file(cache_dir, pending.name)
        kept = {**doc, "subject": pending.name, "key": key, "arch": COMPILE_ARCH}
        kept["stored_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        kept.pop("reused", None)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():  # an entry of the key is never replaced (it is read-only)
                write_json_atomic(str(path), kept)
        except OSError:  # not kept costs the next build a compile, never this stage
            pass
    return doc


def attach(
    name: str,
    doc: dict[str, Any],
    check: CheckDoc,
    checks: list[CheckDoc],
    findings: list[FindingDoc],
) -> None:
    """Attach a compile-only result (``compileonly.collect``) to a skipped subject.

    A pass stays in the skipped check's detail and metrics, never a check of its own: compiling
    is not running, so it must not count as covering the subject. A failed compile is a check
    that fails; a harness that does not fit this build is a warning.
    """
    check["metrics"]["compile_only"] = doc
    where = "here"
    if doc.get("reused"):
        source = doc.get("reused_from") or {}
        where = (
            f"by an earlier stage of compile cache key {str(source.get('key'))[:12]} "
            f"({source.get('stored_at')}), reused"
        )
    if doc.get("status") == "pass":
        det, default = doc["deterministic"], doc["default"]
        changes = "changes" if doc.get("knob_changes_kernel") else "does NOT change"
        check["detail"] += (
            f"; compile-only: both {COMPILE_ARCH} kernels compiled {where} (deterministic "
            f"{det['compile_s']:.1f} s, default {default['compile_s']:.1f} s; the knob {changes} "
            "the kernel)"
        )
    elif doc.get("status") == "fail":
        reason = str(doc.get("reason"))
        if doc.get("reused"):
            reason += f" (compiled {where})"
        checks.append(
            {"name": f"{name}.compile_only", "status": "fail", "detail": reason, "metrics": {}}
        )
    else:
        findings.append(
            {
                "kind": FindingKind.compile_only_unavailable,
                "severity": "warning",
                "subject": name,
                "message": f"could not compile {name} for {COMPILE_ARCH} here: {doc.get('reason')}",
            }
        )
