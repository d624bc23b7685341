"""Isolated candidate environments that reuse the host's torch.

Each job gets a fresh venv. It sees the host's torch (system site packages, or a ``.pth`` line
when the runner itself lives in a venv whose torch the base interpreter cannot see), and a
constraint pins torch to the host's version so installing a candidate never replaces it.

The installers: pip, or uv where it is present (``FE_CI_INSTALLER`` picks ``uv`` or ``pip``;
default: uv when found). No installer runs code of the candidate's choosing: every package is
installed from a wheel (``--only-binary :all:``: nothing is built from a candidate's dependency
list), a direct-URL or VCS requirement in the candidate's metadata is refused before any
installer runs (``refused_requirements``), and the installer's sandbox has no network at all when
the packages come from a wheelhouse alone. The warm path, which installs the candidate alone on
a shared dependency layer, is ``runner/envs/warm_install.py``.
"""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement

from runner.config import RunnerSettings
from runner.envs import layers
from runner.envs.host import host_torch
from runner.isolation import sandbox

if TYPE_CHECKING:
    from runner.isolation.jobbox import JobBox

CUTEDSL_EXTRA = "cutedsl"
HOST_TORCH_PTH = "_fe_ci_host_torch.pth"


@dataclass(frozen=True)
class CandidateEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def site_packages(self) -> Path:
        major, minor = sys.version_info[:2]
        return self.root / "lib" / f"python{major}.{minor}" / "site-packages"


@dataclass(frozen=True)
class WheelMetadata:
    name: str
    version: str
    extras: frozenset[str]
    requires: tuple[str, ...]


def read_wheel_metadata(wheel: Path) -> WheelMetadata:
    """Name, version, extras and requirements from the wheel's METADATA, read as a zip."""
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(
            n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        )
        raw = zf.read(meta_name).decode("utf-8", "replace")
    msg = email.parser.Parser().parsestr(raw, headersonly=True)
    return WheelMetadata(
        name=msg.get("Name", ""),
        version=msg.get("Version", ""),
        extras=frozenset(msg.get_all("Provides-Extra") or []),
        requires=tuple(msg.get_all("Requires-Dist") or []),
    )


MAX_SHOWN = 200  # characters of a refused requirement the reason repeats (hostile input)


def refused_requirements(meta: WheelMetadata) -> list[str]:
    """Why each ``Requires-Dist`` line of the candidate cannot be installed, before any installer
    runs: a direct URL or VCS reference (the installer would fetch it from wherever it points,
    and may build it) or a line that is not a requirement at all. Every line counts, whatever
    its markers say: an installer's reading of a marker is not the runner's to predict."""
    why: list[str] = []
    for line in meta.requires:
        shown = ascii(line[:MAX_SHOWN] + ("..." if len(line) > MAX_SHOWN else ""))
        try:
            req = Requirement(line)
        except InvalidRequirement:
            why.append(f"Requires-Dist {shown} is not a valid requirement")
            continue
        if req.url is not None:
            why.append(
                f"Requires-Dist {shown} is a direct URL or VCS requirement: only packages of "
                "the configured index or wheelhouse are installed"
            )
    return why


def install_extras(meta: WheelMetadata) -> list[str]:
    """The extras to install: ``cutedsl`` wherever the build declares it.

    Releases up to 1.28 keep nvidia-cutlass-dsl there; 1.29 and later made the DSL a base
    dependency and keep cuda-python there, which the CuTe DSL kernels use at run time.
    """
    return [CUTEDSL_EXTRA] if CUTEDSL_EXTRA in meta.extras else []


def create_env(root: Path) -> CandidateEnv:
    """A fresh venv at ``root`` (replacing anything there) that can import the host's torch."""
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)],
        check=True,
        capture_output=True,
    )
    env = CandidateEnv(root)
    torch = host_torch()
    if torch is not None and not _sees(env, torch.site_dir):
        (env.site_packages() / HOST_TORCH_PTH).write_text(f"{torch.site_dir}\n")
    return env


def repoint_host_torch(env: CandidateEnv) -> None:
    """Point a kept environment's host-torch path at the host's torch again when the directory it
    names is gone (the interpreter that made it was moved or deleted); an environment that can
    already import torch is left as it is."""
    pth = env.site_packages() / HOST_TORCH_PTH
    if not pth.is_file():
        return
    named = [Path(line) for line in pth.read_text().splitlines() if line.strip()]
    if named and all(p.is_dir() for p in named):
        return
    torch = host_torch()
    if torch is not None:
        pth.write_text(f"{torch.site_dir}\n")


def _sees(env: CandidateEnv, site_dir: Path) -> bool:
    out = subprocess.run(
        [str(env.python), "-c", "import sys; print('\\n'.join(sys.path))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return any(p and Path(p).resolve() == site_dir for p in out)


def pip_install_command(
    env: CandidateEnv,
    target: str,
    *,
    constraints: Path | None,
    index_url: str | None,
    wheelhouse: Path | None,
) -> list[str]:
    """pip from the runner's own interpreter, installing into ``env`` (no ensurepip per job)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        str(env.python),
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
    ]
    if constraints is not None:
        cmd += ["--constraint", str(constraints)]
    return [*cmd, *_source_args(index_url, wheelhouse), target]


def _source_args(index_url: str | None, wheelhouse: Path | None) -> list[str]:
    """Where packages come from, in flags pip and uv share (a wheelhouse alone: no index), and
    how: wheels only, so that no dependency's build code runs."""
    args: list[str] = ["--only-binary", ":all:"]
    if wheelhouse is not None:
        args += ["--find-links", str(wheelhouse)]
        if index_url is None:
            args.append("--no-index")
    if index_url is not None:
        args += ["--index-url", index_url]
    return args


def install_candidate(
    env: CandidateEnv,
    wheel: Path,
    *,
    job: JobBox,
    log_path: Path,
    timeout_s: float,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
) -> sandbox.Outcome:
    """Install the candidate with its declared dependencies, wheels only; torch pinned to the
    host's. The installer runs in the job's sandbox, as the job's uid, with the network only when
    the packages come from an index."""
    meta = read_wheel_metadata(wheel)
    extras = install_extras(meta)
    target = f"{wheel.resolve()}[{','.join(extras)}]" if extras else str(wheel.resolve())
    constraints = None
    torch = host_torch()
    if torch is not None:
        constraints = env.root / "fe-ci-constraints.txt"
        constraints.write_text(f"torch=={torch.version}\n")
    cmd = pip_install_command(
        env, target, constraints=constraints, index_url=index_url, wheelhouse=wheelhouse
    )
    network = needs_network(index_url, wheelhouse)
    return run_installer(
        job, env, cmd, log_path, timeout_s, reads=(wheel, wheelhouse), network=network
    )


def needs_network(index_url: str | None, wheelhouse: Path | None) -> bool:
    """Whether an install from these sources reaches the network: not from a wheelhouse alone."""
    return index_url is not None or wheelhouse is None


def run_installer(
    job: JobBox,
    env: CandidateEnv,
    cmd: list[str],
    log_path: Path,
    timeout_s: float,
    *,
    reads: tuple[Path | None, ...] = (),
    cancel: threading.Event | None = None,
    network: bool,
) -> sandbox.Outcome:
    """``cmd``, an installer filling ``env``, in the job's sandbox, with the network where
    ``network`` says (``needs_network``); ``reads`` (a wheel, a wheelhouse, a layer) shown
    read-only."""
    shown = tuple(p.resolve().parent if p.is_file() else p.resolve() for p in reads if p)
    with job.writing(env.root):
        return sandbox.run(
            cmd,
            timeout_s=timeout_s,
            log_path=log_path,
            env=job.environ("install", env.python.parent),
            cancel=cancel,
            box=job.box(env.root, network=network, ro=shown),
        )


# ---------------------------------------------------------------------------- installers


def find_uv() -> str | None:
    """The uv binary: the ``uv`` package beside the runner, else one on PATH."""
    try:
        import uv  # type: ignore[import-not-found, unused-ignore]

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def choose_installer() -> str:
    """``FE_CI_INSTALLER`` (``uv`` or ``pip``), else uv where present, else pip."""
    if RunnerSettings().installer == "pip":
        return "pip"
    if find_uv() is not None:
        return "uv"
    return "pip"


def install_command(
    installer: str,
    env: CandidateEnv,
    targets: list[str],
    *,
    no_deps: bool = False,
    constraints: Path | None = None,
    overrides: Path | None = None,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
    compile_bytecode: bool = False,
) -> list[str]:
    """One install into ``env`` by ``installer`` (uv copies files: a job never shares inodes).

    ``compile_bytecode`` for a layer: read-only, it would otherwise be compiled again by every
    process that imports it (about 1.5 s of each probe for the CuTe DSL, measured). Not for the
    candidate: its 1,000-odd modules take about 4 s to compile, more than its stages save.
    """
    if installer == "pip":
        cmd = pip_install_command(
            env, targets[0], constraints=constraints, index_url=index_url, wheelhouse=wheelhouse
        )
        cmd[-1:] = targets
        if no_deps:
            cmd.insert(-len(targets), "--no-deps")
        if not compile_bytecode:
            cmd.insert(-len(targets), "--no-compile")
        return cmd
    uv = find_uv()
    if uv is None:
        raise layers.LayerError("uv is not installed")
    cmd = [uv, "pip", "install", "--no-config", "--python", str(env.python)]
    cmd += ["--link-mode", "copy", "--no-progress"]
    if compile_bytecode:
        cmd.append("--compile-bytecode")
    if no_deps:
        cmd.append("--no-deps")
    if constraints is not None:
        cmd += ["--constraint", str(constraints)]
    if overrides is not None:
        cmd += ["--override", str(overrides)]
    return [*cmd, *_source_args(index_url, wheelhouse), *targets]
