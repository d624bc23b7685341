"""Starting a candidate-side stage: its private source, its environment, its process.

Each stage is a subprocess of the candidate's Python (or a fork of a warm zygote), in the job's
sandbox (``jobbox.py``, ``jail.py``) with a timeout, with the allowlist's environment
(``allowlist.py``) and a private copy of ``runner/inside`` and of core's standard-library part
(the subject declarations) on its path and nothing else of the runner; it hands back one JSON
document, read here as untrusted input.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import subjects
from core.wire import Stage
from runner.envs import envs
from runner.inside import documents
from runner.isolation import allowlist, sandbox
from runner.isolation.jobbox import JobBox

if TYPE_CHECKING:
    from runner.isolation.zygotes import Zygote

INSIDE_SRC = Path(__file__).parents[1] / "inside"
CORE_SRC = Path(subjects.__file__).parent
# What a candidate stage imports of core: standard library only
# (tests/functional/test_imports.py holds it).
CORE_FOR_CANDIDATE = (
    "__init__.py",
    "subjects.py",
    "surface.py",
    "comparable.py",
    "harness.py",
    "ledger.json",
)
STAGE_MODULES = {
    Stage.probe: "runner.inside.probe",
    Stage.determinism: "runner.inside.determinism",
    Stage.refusal: "runner.inside.refusal",
}
MAX_DOC_BYTES = 64 << 20  # a stage's document; far above any real one

# What the determinism stage sets for itself (``runner/inside/subjects/base.py``: where the CuTe
# DSL keeps its kernels, the compile cache the runner prepared); never the runner's to pass.
RUNNER_OWNED_ENV = (
    "CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED",
)


def private_source(work_dir: Path) -> Path:
    """A copy of the candidate-side package: the candidate sees no other runner code."""
    root = work_dir / "src"
    if root.exists():
        shutil.rmtree(root)
    pkg = root / "runner"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copytree(INSIDE_SRC, pkg / "inside", ignore=shutil.ignore_patterns("__pycache__"))
    core = root / "core"
    core.mkdir()
    for name in CORE_FOR_CANDIDATE:
        shutil.copyfile(CORE_SRC / name, core / name)
    return root


def run_stage(
    stage: Stage,
    params: dict[str, Any],
    *,
    job: JobBox,
    src: Path,
    python: Path,
    zygote: Zygote | None,
    timeout_s: float,
    cancel: threading.Event | None,
    rw: tuple[Path, ...] = (),
    ro: tuple[Path, ...] = (),
) -> tuple[sandbox.Outcome, Path]:
    """Run ``stage`` on ``params`` in the candidate's environment, in the job's sandbox: (its
    outcome, its document's path). ``zygote``, where one may serve, forks it warm; otherwise a
    fresh interpreter. ``rw``: what else the stage writes (its compile-cache directory)."""
    params_path = job.work / "params" / f"{stage}.json"
    out_path = job.own / f"{stage}.result.json"
    params_path.write_text(json.dumps(params, default=str))
    if why := clear(out_path):  # what an earlier stage of the candidate left there
        return sandbox.Outcome("refused", None, None, 0.0, "", why), out_path
    env = stage_environ(stage, job.home, python, src)
    argv = ["--in", str(params_path), "--out", str(out_path)]
    log_path = job.work / "logs" / f"{stage}.log"
    outcome = None
    if zygote is not None:
        outcome = zygote.run(
            module=STAGE_MODULES[stage],
            params=params_path,
            env=env,
            site=envs.CandidateEnv(python.parent.parent).site_packages(),
            log_path=log_path,
            out_path=out_path,
            timeout_s=timeout_s,
            cancel=cancel,
        )
    if outcome is None:
        extra = (Path(x),) if (x := os.environ.get(subjects.EXTRA_SUBJECTS_ENV)) else ()
        with job.writing(*rw):
            outcome = sandbox.run(
                [str(python), "-m", STAGE_MODULES[stage], *argv],
                timeout_s=timeout_s,
                log_path=log_path,
                env=env,
                cancel=cancel,
                box=job.box(*rw, ro=(*ro, *(p.parent for p in extra))),
            )
    return outcome, out_path


def stage_environ(stage: Stage, home: Path, python: Path, src: Path) -> dict[str, str]:
    """The whole environment of a stage: the allowlist's, the probe without a GPU."""
    chosen = {"CUDA_VISIBLE_DEVICES": ""} if stage == Stage.probe else {}
    return allowlist.candidate_environ(
        "stage", home=home, path=[python.parent], pythonpath=src, chosen=chosen
    )


def clear(path: Path) -> str:
    """Remove whatever the candidate left at ``path`` (a file, a link, a fifo, a folder: never
    followed); "", or why it could not be, in the candidate's name and without a host path."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"the candidate left {path.name} unreadable ({exc.strerror})"
    try:
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path)  # never follows a link inside
        else:
            os.unlink(path)
    except OSError as exc:
        return f"the candidate left {path.name} where the runner cannot remove it ({exc.strerror})"
    return ""


def read_untrusted(path: Path, limit: int = MAX_DOC_BYTES) -> bytes | str:
    """A file the candidate wrote, in a directory it owned: its bytes, or why it is refused.
    Opened without following a link, a regular file only, read only as far as ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder is refused before it is read
            return "not a regular file"
        raw = b""
        while len(raw) <= limit and (chunk := os.read(fd, limit + 1 - len(raw))):
            raw += chunk
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else f"larger than {limit} bytes"


def read_doc(stage: Stage, path: Path) -> tuple[dict[str, Any], str]:
    """The stage's document and "", or {} and why it is refused: it is the candidate's output."""
    raw = read_untrusted(path)
    if isinstance(raw, str):
        return {}, raw
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return {}, f"not JSON ({exc})"
    except RecursionError:
        return {}, "not JSON the runner reads (nested too deep)"
    if not isinstance(doc, dict):
        return {}, "not a JSON object"
    found = documents.problems(stage.value, doc)
    if found:
        return {}, "; ".join(found)
    return doc, ""


def copy_doc(doc: Path, out_path: Path) -> None:
    """A warm stage's document (a file the worker's uid wrote) into ``out_path``, a file of the
    runner's; nothing when there is none to read."""
    data = "left in place" if clear(out_path) else read_untrusted(doc)
    if isinstance(data, bytes):
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(out, "wb") as dst:
            dst.write(data)
