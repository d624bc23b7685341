"""Starting a candidate-side stage: its private source, its environment, its process.

Each stage is a subprocess of the candidate's Python (or a fork of a warm zygote), in its own
process group with a timeout, with a private copy of ``runner/inside`` and of core's
standard-library part (the subject declarations) on its path and nothing else of the runner;
it hands back one JSON document, read here as untrusted input.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import subjects
from core.wire import Stage
from runner import envs, sandbox
from runner.inside import documents

if TYPE_CHECKING:
    from runner.zygotes import Zygote

INSIDE_SRC = Path(__file__).parent / "inside"
CORE_SRC = Path(subjects.__file__).parent
# What a candidate stage imports of core: standard library only (tests/test_imports.py holds it).
CORE_FOR_CANDIDATE = ("__init__.py", "subjects.py", "comparable.py", "ledger.json")
STAGE_MODULES = {
    Stage.probe: "runner.inside.probe",
    Stage.determinism: "runner.inside.determinism",
    Stage.refusal: "runner.inside.refusal",
}


# Where the CuTe DSL keeps its kernels is the runner's decision (the compile cache, keyed per
# build, set inside the determinism stage). Inherited from the runner's own environment, these
# would point a sandboxed candidate at a directory it may not write, and the frontend's
# flex-attention module, which creates its cache directory on import, would fail to import.
RUNNER_OWNED_ENV = (
    "CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED",
)


def candidate_environ(base: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment of a stage in the candidate's environment: ``base`` less the runner's own."""
    env = {k: v for k, v in base.items() if k not in RUNNER_OWNED_ENV}
    env.update(extra)
    return env


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
    work: Path,
    src: Path,
    python: Path,
    zygote: Zygote | None,
    timeout_s: float,
    cancel: threading.Event | None,
) -> tuple[sandbox.Outcome, Path]:
    """Run ``stage`` on ``params`` in the candidate's environment: (its outcome, its document's
    path). ``zygote``, where one may serve, forks it warm; otherwise a fresh interpreter."""
    params_path = work / f"{stage}.params.json"
    out_path = work / f"{stage}.result.json"
    params_path.write_text(json.dumps(params, default=str))
    out_path.unlink(missing_ok=True)
    home = work / "home"  # HOME and TMPDIR of the candidate: its own, writable by it
    for path in (work, home):
        path.mkdir(parents=True, exist_ok=True)
        sandbox.hand_over(path)
    sandbox.make_reachable(python)  # an environment outside the work dir, too
    if extra := os.environ.get(subjects.EXTRA_SUBJECTS_ENV):  # a registry extension, too
        sandbox.make_reachable(Path(extra))
    if (torch := envs.host_torch()) is not None:  # and the host's torch it reuses
        sandbox.make_reachable(torch.site_dir)
    env = candidate_environ(
        dict(os.environ),
        PYTHONPATH=str(src),
        PYTHONDONTWRITEBYTECODE="1",
        HOME=str(home),
        TMPDIR=str(home),
    )
    if stage == Stage.probe:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the probe is CPU only, by contract
    argv = ["--in", str(params_path), "--out", str(out_path)]
    log_path = work / "logs" / f"{stage}.log"
    outcome = None
    if zygote is not None:
        outcome = zygote.run(
            module=STAGE_MODULES[stage],
            argv=argv,
            env=env,
            cwd=work,
            sites=[envs.CandidateEnv(python.parent.parent).site_packages()],
            python=python,
            log_path=log_path,
            timeout_s=timeout_s,
            cancel=cancel,
        )
    if outcome is None:
        outcome = sandbox.run(
            [str(python), "-m", STAGE_MODULES[stage], *argv],
            timeout_s=timeout_s,
            log_path=log_path,
            env=env,
            cwd=work,
            cancel=cancel,
            isolate=True,
        )
    return outcome, out_path


def read_doc(stage: Stage, path: Path) -> tuple[dict[str, Any], str]:
    """The stage's document and "", or {} and why it is refused: it is the candidate's output."""
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return {}, f"not JSON ({exc})"
    found = documents.problems(stage.value, doc)
    if found:
        return {}, "; ".join(found)
    return doc, ""
