"""The ``install`` stage: the candidate's wheel into a fresh environment of its own.

The warm path first (``runner/envs/warm_install.py``: the candidate alone, ``--no-deps``, on a
shared dependency layer), where the options name a layers dir; a plain ``pip install`` of the wheel
and its dependencies when the warm path cannot serve, saying why. A failed install says what pip
said. A candidate whose metadata names a direct-URL or VCS requirement is refused before any
installer runs: the stage ends ``error``, naming the requirement (``envs.refused_requirements``).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from core.wire import Stage, StageResult, Status
from runner.envs import backend, envs, layers, warm_install
from runner.isolation.jobbox import JobBox
from runner.pipeline.pipeline_options import Options
from runner.pipeline.stage_results import failed_stage

log = logging.getLogger("fe_ci.pipeline")

_PIP_ERROR = re.compile(
    r"^(ERROR: .*|error: .*|.*ResolutionImpossible.*|.*No matching distribution.*"
    r"|\s*(?:\u00d7|\u2570\u2500\u25b6) .*)$",
    re.M,
)


@dataclass(frozen=True)
class Installed:
    """The stage's result, and where the later stages find the candidate."""

    result: StageResult
    python: Path  # the candidate's interpreter
    layer: layers.Layer | None = None
    # installed on the warm path: the environment is exactly ``layer`` (none when the candidate
    # declares no dependencies) + the candidate, so a warm parent of that layer may serve it
    warm: bool = False


def _installed(what: str, duration: float, how: str, version: str) -> StageResult:
    return StageResult(
        name=Stage.install,
        status=Status.pass_,
        reason=f"installed {what} in {duration:.1f} s ({how})",
        duration_s=duration,
        version=version,
    )


def install(opts: Options, wheel: Path | None, python: Path, job: JobBox) -> Installed:
    """Install ``wheel`` under ``opts.work_dir``, in ``job``'s sandbox; ``python`` is the
    candidate's interpreter until then (a preinstalled candidate keeps it)."""
    if opts.preinstalled:
        return Installed(
            StageResult(
                name=Stage.install,
                status=Status.not_applicable,
                reason=f"preinstalled: the candidate is importable by {python}",
            ),
            python,
        )
    if wheel is None:
        return Installed(
            StageResult(name=Stage.install, status=Status.error, reason="no wheel to install"),
            python,
        )
    start = time.monotonic()
    meta = envs.read_wheel_metadata(wheel)
    if refused := envs.refused_requirements(meta):
        reason = "refused before installing: " + "; ".join(refused[:3])
        if len(refused) > 3:
            reason += f"; and {len(refused) - 3} more"
        log.warning("event=install_refused requirements=%s", len(refused))
        return Installed(
            StageResult(name=Stage.install, status=Status.error, reason=reason), python
        )
    extras = envs.install_extras(meta)
    what = f"{meta.name} {meta.version}" + (f" [{','.join(extras)}]" if extras else "")
    log_path = opts.work_dir / "logs" / "install.log"
    env = envs.create_env(opts.work_dir / "env")
    venv = f"venv {time.monotonic() - start:.2f} s"
    note = ""
    if opts.layers_dir is not None:
        warm, layer, note = _install_warm(opts, env, wheel, job)
        if warm is not None:
            duration = time.monotonic() - start
            how = f"{venv}; {warm}"
            return Installed(_installed(what, duration, how, meta.version), env.python, layer, True)
        env = envs.create_env(opts.work_dir / "env")  # fresh: nothing of the attempt
    outcome = envs.install_candidate(
        env,
        wheel,
        job=job,
        log_path=log_path,
        timeout_s=opts.install_timeout_s,
        index_url=opts.index_url,
        wheelhouse=opts.wheelhouse,
    )
    duration = time.monotonic() - start
    if outcome.ok:
        how = f"{venv}; plain install{note}"
        return Installed(_installed(what, duration, how, meta.version), env.python)
    if outcome.status in ("timeout", "crashed"):
        return Installed(failed_stage(Stage.install, outcome), env.python)
    errors = _PIP_ERROR.findall(outcome.log_tail)
    result = StageResult(
        name=Stage.install,
        status=Status.fail,
        reason=("; ".join(errors[-3:]) or f"pip {outcome.describe()}") + note,
        duration_s=duration,
        log_tail=outcome.log_tail,
    )
    return Installed(result, env.python)


def _install_warm(
    opts: Options, env: envs.CandidateEnv, wheel: Path, job: JobBox
) -> tuple[str | None, layers.Layer | None, str]:
    """(how the warm path installed, None when it could not; the layer it used; why it could
    not)."""
    assert opts.layers_dir is not None
    try:
        warm = warm_install.install_warm(
            env,
            wheel,
            job=job,
            layers_dir=opts.layers_dir,
            log_path=opts.work_dir / "logs" / "install-warm.log",
            timeout_s=opts.install_timeout_s,
            index_url=opts.index_url,
            wheelhouse=opts.wheelhouse,
        )
    except layers.LayerError as exc:
        why = (_PIP_ERROR.findall(str(exc)) or [str(exc).splitlines()[0]])[-1]
        log.warning("event=layer_unusable error=%s", why)
        return None, None, f"; no dependency layer: {why}"
    if not warm.outcome.ok:
        return None, None, f"; the warm install failed: {warm.outcome.describe()}"
    if warm.problems:
        return None, None, f"; the layer did not satisfy: {'; '.join(warm.problems[:3])}"
    how = f"candidate only, --no-deps, by {warm.installer}"
    if warm.layer is None:
        return f"{how}; no dependencies declared", None, ""
    key = warm.layer.spec.key
    if warm.layer.built_s is None:
        return f"{how}; dependency layer {key} reused", warm.layer, ""
    return f"{how}; dependency layer {key} built in {warm.layer.built_s:.1f} s", warm.layer, ""


@dataclass(frozen=True)
class Backend:
    """The cuDNN backend layer a job's stages load, and what the install stage says of it."""

    layer: layers.Layer
    lib_dirs: tuple[Path, ...]
    said: str


def install_backend(
    opts: Options, done: Installed, job: JobBox
) -> tuple[Installed, Backend | None]:
    """The job's cuDNN backend (``opts.cudnn``) as a layer, after the candidate installed: reused
    when the host has it, else built once. A wheel that does not install ends the install stage
    ``error`` with the installer's reason (the cell errs; the build's other cells go on)."""
    if opts.cudnn is None or done.result.status not in (Status.pass_, Status.not_applicable):
        return done, None
    start = time.monotonic()
    req = backend.requirement(opts.cudnn)
    try:
        layer = backend.ensure(
            opts.cudnn,
            layers_dir=opts.layers_dir or opts.work_dir / "layers",
            timeout_s=opts.install_timeout_s,
            index_url=opts.index_url,
            wheelhouse=opts.wheelhouse,
            job=job,
        )
    except layers.LayerError as exc:
        why = (_PIP_ERROR.findall(str(exc)) or [str(exc).splitlines()[0]])[-1]
        log.warning("event=backend_unusable cudnn=%s error=%s", opts.cudnn, why)
        result = StageResult(
            name=Stage.install,
            status=Status.error,
            reason=f"the cuDNN backend {opts.cudnn} ({req}) did not install: {why}",
            duration_s=done.result.duration_s + time.monotonic() - start,
            version=done.result.version,
            log_tail=str(exc)[-4000:],
        )
        return Installed(result, done.python, done.layer, done.warm), None
    site = (
        None if opts.preinstalled else envs.CandidateEnv(done.python.parent.parent).site_packages()
    )
    backend.attach(site, layer)
    how = "reused" if layer.built_s is None else f"built in {layer.built_s:.1f} s"
    said = f"cuDNN backend {opts.cudnn}: {req}, layer {layer.spec.key} {how}"
    result = done.result.model_copy(
        update={
            "reason": f"{done.result.reason}; {said}",
            "duration_s": done.result.duration_s + time.monotonic() - start,
        }
    )
    dirs = tuple(backend.lib_dirs(layer))
    return Installed(result, done.python, done.layer, done.warm), Backend(layer, dirs, said)
