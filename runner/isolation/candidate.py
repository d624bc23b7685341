"""Starting a candidate-side stage: its environment, its process, its document read back.

Each stage is a subprocess of the candidate's Python (or a fork of a warm zygote), in the job's
sandbox (``jobbox.py``, ``jail.py``) with a timeout, with the allowlist's environment
(``allowlist.py``) and a private copy of ``runner/inside`` and of core's standard-library part
(the subject declarations; ``stage_source.py``) on its path and nothing else of the runner; it
hands back one JSON document, read here as untrusted input.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import subjects
from core.wire import Stage
from runner.envs import envs
from runner.inside import documents
from runner.isolation import allowlist, sandbox, stage_source
from runner.isolation.jobbox import JobBox

if TYPE_CHECKING:
    from runner.isolation.zygotes import Zygote

STAGE_MODULES = {
    Stage.probe: "runner.inside.probe",
    Stage.determinism: "runner.inside.determinism",
    Stage.refusal: "runner.inside.refusal",
}

# What the determinism stage sets for itself (``runner/inside/subjects/base.py``: where the CuTe
# DSL keeps its kernels, the compile cache the runner prepared); never the runner's to pass.
RUNNER_OWNED_ENV = (
    "CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_DIR",
    "FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED",
)


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
    lib_dirs: tuple[Path, ...] = (),
) -> tuple[sandbox.Outcome, Path]:
    """Run ``stage`` on ``params`` in the candidate's environment, in the job's sandbox: (its
    outcome, its document's path). ``zygote``, where one may serve, forks it warm; otherwise a
    fresh interpreter. ``rw``: what else the stage writes (its compile-cache directory);
    ``lib_dirs``: put first on ``LD_LIBRARY_PATH`` (a cuDNN backend layer's library)."""
    params_path = job.work / "params" / f"{stage}.json"
    out_path = job.own / f"{stage}.result.json"
    params_path.write_text(json.dumps(params, default=str))
    if why := stage_source.clear(out_path):  # what an earlier stage of the candidate left there
        return sandbox.Outcome("refused", None, None, 0.0, "", why), out_path
    env = stage_environ(stage, job.home, python, src, lib_dirs)
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
        x = os.environ.get(subjects.EXTRA_SUBJECTS_ENV)
        extra = (subjects.extra_home(x),) if x else ()
        with job.writing(*rw):
            outcome = sandbox.run(
                [str(python), "-m", STAGE_MODULES[stage], *argv],
                timeout_s=timeout_s,
                log_path=log_path,
                env=env,
                cancel=cancel,
                box=job.box(*rw, ro=(*ro, *extra)),
            )
    return outcome, out_path


def stage_environ(
    stage: Stage, home: Path, python: Path, src: Path, lib_dirs: tuple[Path, ...] = ()
) -> dict[str, str]:
    """The whole environment of a stage: the allowlist's, the probe without a GPU, and
    ``lib_dirs`` first on ``LD_LIBRARY_PATH``."""
    chosen = {"CUDA_VISIBLE_DEVICES": ""} if stage == Stage.probe else {}
    env = allowlist.candidate_environ(
        "stage", home=home, path=[python.parent], pythonpath=src, chosen=chosen
    )
    if lib_dirs:
        env["LD_LIBRARY_PATH"] = allowlist.library_path(lib_dirs, env)
    return env


def read_doc(stage: Stage, path: Path) -> tuple[dict[str, Any], str]:
    """The stage's document and "", or {} and why it is refused: it is the candidate's output."""
    raw = stage_source.read_untrusted(path)
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
