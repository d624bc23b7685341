"""Commit builds: a bare mirror per repository, fetch the commit, export its tree, build a wheel.

The wheel is built by the repository's own build backend (``uv build --no-build-isolation``, or
``pip wheel --no-deps --no-build-isolation`` where the runner installs with pip) in a fresh
environment whose build requirements come from the index or the wheelhouse; dlpack is
supplied through ``FETCHCONTENT_SOURCE_DIR_DLPACK`` where the host has it, so no network is needed
beyond the package index.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from core.bounds import clip
from core.commits import BuildFailure, ensure_commit, export_tree
from core.wire import Stage, StageResult, Status
from runner.config import RunnerSettings
from runner.envs import envs
from runner.isolation import jobbox, redact, sandbox, uids
from runner.isolation.jobbox import JobBox
from runner.pipeline.stage_results import redacted


@dataclass(frozen=True)
class Built:
    wheel: Path
    log: Path
    duration_s: float


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


# The first line that says what went wrong, under pip's and setuptools' wrapping of it.
_ERROR_LINE = re.compile(
    r"^\s*(CMake Error\b.*|.*\bfatal error:.*|.*\berror: (?!subprocess-exited).*)$"
)
_WRAPPER_NOISE = ("Failed building wheel", "Failed to build", "ERROR: Failed")


def first_error(log: Path, *, context: int = 3, limit: int = 400) -> str:
    """The build's first error and the lines that explain it (a CMake message is indented under
    its ``CMake Error at ...`` line), in one line: the log's tail is pip's traceback, not the cause.
    """
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for i, line in enumerate(lines):
        if _ERROR_LINE.match(line) and not any(n in line for n in _WRAPPER_NOISE):
            picked = [line.strip()]
            picked += [x.strip() for x in lines[i + 1 : i + 1 + context] if x.strip()]
            text = " ".join(picked)
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return ""


def build_requirements(src: Path) -> list[str]:
    pyproject = src / "pyproject.toml"
    if not pyproject.is_file():
        return ["setuptools", "wheel"]
    data = tomllib.loads(pyproject.read_text())
    reqs = data.get("build-system", {}).get("requires", ["setuptools", "wheel"])
    return [str(r) for r in reqs]


def wheel_command(installer: str, env: envs.CandidateEnv, src: Path, out_dir: Path) -> list[str]:
    """The repository's own build backend, run in ``env`` (no isolation: its build requirements
    are already there), writing one wheel into ``out_dir``. uv where the runner installs with uv:
    it starts the backend in about a third of pip's time (``docs/commit-builds.md``)."""
    if installer == "uv":
        uv = envs.find_uv()
        if uv is not None:
            return [uv, "build", "--wheel", "--no-build-isolation", "--no-config",
                    "--python", str(env.python), "--out-dir", str(out_dir), str(src)]  # fmt: skip
    cmd = [str(env.python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
           "--disable-pip-version-check", "--no-input", "-w", str(out_dir), str(src)]  # fmt: skip
    if not (env.root / "bin" / "pip").exists():  # the env has no pip of its own: use ours
        cmd = [sys.executable, "-m", "pip", "--python", str(env.python), *cmd[3:]]
    return cmd


def build_wheel(
    src: Path,
    out_dir: Path,
    *,
    work: Path,
    log: Path,
    timeout_s: float,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
    cancel: threading.Event | None = None,
    installer: str | None = None,
    job: JobBox | None = None,
) -> Path:
    """Build ``src`` with its own build backend; returns the wheel. Raises ``BuildFailure``.

    ``installer`` (``uv`` or ``pip``; default ``envs.choose_installer()``) installs the build
    requirements and starts the build. Both run the commit's code: in ``job``'s sandbox (one of
    their own without a job), the installer with the package index, the build with no network."""
    if job is None:
        with jobbox.temporary(work) as own:
            return build_wheel(
                src, out_dir, work=work, log=log, timeout_s=timeout_s, index_url=index_url,
                wheelhouse=wheelhouse, cancel=cancel, installer=installer, job=own,
            )  # fmt: skip
    installer = installer or envs.choose_installer()
    env = envs.create_env(work / "build-env")
    reqs = build_requirements(src)
    install = envs.install_command(installer, env, reqs, index_url=index_url, wheelhouse=wheelhouse)
    network = envs.needs_network(index_url, wheelhouse)
    outcome = envs.run_installer(
        job, env, install, log, timeout_s, reads=(wheelhouse, src), cancel=cancel, network=network
    )
    if not outcome.ok:
        raise BuildFailure(
            "build_failed",
            f"installing build requirements failed ({outcome.describe()})",
            outcome.log_tail,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # As an isolated build would: the build requirements' scripts (cmake, ninja) come first, and
    # CMake finds their packages (pybind11's config) from that prefix; dlpack's sources come from
    # FETCHCONTENT_SOURCE_DIR_DLPACK where the host has them (the allowlist passes it).
    child = job.environ("build", env.root / "bin")
    cmd = wheel_command(installer, env, src, out_dir)
    dlpack = os.environ.get("FETCHCONTENT_SOURCE_DIR_DLPACK")
    with job.writing(src, out_dir, files=True):  # the commit's own files: a build rewrites some
        outcome = sandbox.run(
            cmd,
            timeout_s=timeout_s,
            log_path=log,
            env=child,
            cancel=cancel,
            box=job.box(src, out_dir, ro=(env.root, *([Path(dlpack)] if dlpack else []))),
        )
    if outcome.status in ("timeout", "crashed", "cancelled"):
        raise BuildFailure("build_failed", f"the build {outcome.describe()}", outcome.log_tail)
    wheels = sorted(out_dir.glob("*.whl"))
    if not outcome.ok or len(wheels) != 1:
        cause = first_error(log)
        what = "uv build" if cmd[1:2] == ["build"] else "pip wheel"
        why = f"{what} {outcome.describe()}" + (f": {cause}" if cause else "")
        if outcome.ok:
            why = f"{what} left {len(wheels)} wheels, not one"
        raise BuildFailure("build_failed", why, outcome.log_tail)
    return wheels[0]


def run_build(
    repo_url: str,
    sha: str,
    *,
    cache_dir: Path,
    work: Path,
    timeout_s: float,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
    cancel: threading.Event | None = None,
    uid_range: uids.UidRange | None = None,
    private: tuple[Path, ...] = (),
    secrets: tuple[str, ...] | None = None,
) -> tuple[StageResult, Built | None]:
    """The ``build`` stage: a result for the report (with no runner secret in it), and the wheel
    when it worked. The build runs as a job of its own: ``uid_range``'s uid, ``private`` hidden."""
    result, built = _run_build(
        repo_url, sha, cache_dir=cache_dir, work=work, timeout_s=timeout_s, index_url=index_url,
        wheelhouse=wheelhouse, cancel=cancel, uid_range=uid_range, private=private,
    )  # fmt: skip
    return redacted(result, redact.runner_secrets() if secrets is None else secrets), built


def _run_build(
    repo_url: str,
    sha: str,
    *,
    cache_dir: Path,
    work: Path,
    timeout_s: float,
    index_url: str | None,
    wheelhouse: Path | None,
    cancel: threading.Event | None,
    uid_range: uids.UidRange | None,
    private: tuple[Path, ...],
) -> tuple[StageResult, Built | None]:
    start = time.monotonic()
    log = work / "logs" / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        mirror = ensure_commit(repo_url, sha, cache_dir, log)
        src = export_tree(mirror, sha, work / "src")
        with jobbox.temporary(work, uid_range, private) as job:
            wheel = build_wheel(
                src,
                work / "dist",
                work=work,
                log=log,
                timeout_s=timeout_s,
                index_url=index_url,
                wheelhouse=wheelhouse,
                cancel=cancel,
                job=job,
            )
    except BuildFailure as exc:
        result = StageResult(
            name=Stage.build,
            status=Status.fail if exc.kind == "build_failed" else Status.error,
            reason=clip(f"{exc.kind}: {exc.message}"),
            duration_s=time.monotonic() - start,
            log_tail=exc.log_tail,
        )
        return result, None
    duration = time.monotonic() - start
    meta = envs.read_wheel_metadata(wheel)
    result = StageResult(
        name=Stage.build,
        status=Status.pass_,
        reason=f"built {wheel.name} from {sha[:12]} in {duration:.1f} s",
        duration_s=duration,
        version=meta.version,
        log_tail=sandbox.tail(log, 2000),
    )
    return result, Built(wheel=wheel, log=log, duration_s=duration)


def build_commit(
    s: RunnerSettings,
    repo_url: str,
    sha: str,
    work: Path,
    cancel: threading.Event | None = None,
) -> tuple[StageResult, Built | None]:
    """``run_build`` with a runner's settings: how every caller (a builder runner, ``fe-ci
    validate --commit``, ``fe-ci bisect``) builds a commit."""
    return run_build(
        repo_url,
        sha,
        cache_dir=Path(s.cache_dir),
        work=work,
        timeout_s=s.stage_timeout_s,
        index_url=s.index_url,
        wheelhouse=s.wheelhouse,
        cancel=cancel,
        uid_range=s.uid_range(),
        private=s.private_dirs(),
        secrets=s.secrets(),
    )
