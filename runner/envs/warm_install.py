"""The warm path: the candidate's dependencies from a shared, read-only dependency layer.

A layer (``runner.envs.layers``) is keyed by the resolved dependency set and built once; the job's
venv installs the candidate wheel alone (``install_warm``). uv's ``pip install`` does not see system
site packages, so torch is taken out of its resolution by an override and the host's torch is
checked against every requirement afterwards instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from runner.envs import envs, host, layer_use, layers
from runner.isolation import jobbox, sandbox
from runner.isolation.jobbox import JobBox


def ensure_layer(
    meta: envs.WheelMetadata,
    *,
    layers_dir: Path,
    timeout_s: float,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
    installer: str | None = None,
    job: JobBox | None = None,
    check_torch: bool = True,
    host_deps: bool = False,
) -> layers.Layer | None:
    """The dependency layer of ``meta``'s resolved dependency set: reused, or built once (by the
    installer in ``job``'s sandbox; without a job, in one of its own).

    None when the candidate declares nothing to install. Raises ``LayerError`` (with the
    resolver's message) when the layer cannot be built, or must not be used. ``check_torch``
    False: the host torch's own requirements are not held against the layer (a cuDNN backend
    layer replaces the backend torch pins, ``runner/envs/backend.py``). ``host_deps``: the
    requirements are installed without their dependencies, which the host's torch environment
    provides (a backend wheel's CUDA libraries); what they are is kept in ``layer.json``.
    """
    torch = host.host_torch()
    spec = layers.layer_spec(
        meta.requires,
        envs.install_extras(meta),
        torch=torch.version if torch else None,
        index_url=index_url,
        wheelhouse=wheelhouse,
        installer=installer or envs.choose_installer(),
    )
    if host_deps:
        spec = dataclasses.replace(spec, host_deps=True)
    if not spec.requirements:
        return None
    root = layers_dir / spec.key
    found = layer_use.found(layers_dir, spec)
    if found is not None:
        return found
    with layers.locked(layers_dir / f"{spec.key}.lock", timeout_s):
        found = layers.usable(root, spec)  # another runner built it while we waited
        if found is None and job is not None:
            found = _build_layer(
                spec, root, timeout_s, index_url, wheelhouse, torch, job, check_torch
            )
        elif found is None:
            with jobbox.temporary(layers_dir / f".job-{spec.key}-{os.getpid()}") as own:
                try:
                    found = _build_layer(
                        spec, root, timeout_s, index_url, wheelhouse, torch, own, check_torch
                    )
                finally:
                    shutil.rmtree(own.work, ignore_errors=True)
        layer_use.touch(layers_dir, spec.key)
        return found


def _build_layer(
    spec: layers.LayerSpec,
    root: Path,
    timeout_s: float,
    index_url: str | None,
    wheelhouse: Path | None,
    torch: host.HostTorch | None,
    job: JobBox,
    check_torch: bool = True,
) -> layers.Layer:
    start = time.monotonic()
    for stale in root.parent.glob(f".build-{spec.key}-*"):  # a runner that died mid-build
        layers.remove(stale)
    tmp = root.parent / f".build-{spec.key}-{os.getpid()}"
    try:
        env = envs.create_env(tmp / "venv")
        (tmp / "requirements.txt").write_text("".join(f"{r}\n" for r in spec.requirements))
        constraints = overrides = None
        if torch is not None:
            constraints = tmp / "constraints.txt"
            constraints.write_text(f"torch=={torch.version}\n")
            if spec.installer == "uv":  # uv cannot see the host's torch: keep torch out entirely
                overrides = tmp / "overrides.txt"
                overrides.write_text('torch ; python_version < "0"\n')
                constraints = None
        cmd = envs.install_command(
            spec.installer,
            env,
            ["-r", str(tmp / "requirements.txt")],
            no_deps=spec.host_deps,
            constraints=constraints,
            overrides=overrides,
            index_url=index_url,
            wheelhouse=wheelhouse,
            compile_bytecode=True,
        )
        # the installer writes the layer as the job's uid; taken back (the runner's, read-only)
        # before anything reads it
        network = envs.needs_network(index_url, wheelhouse)
        outcome = envs.run_installer(
            job, env, cmd, tmp / "install.log", timeout_s, reads=(tmp, wheelhouse), network=network
        )
        if not outcome.ok:
            raise layers.LayerError(
                f"{spec.installer} could not build the layer ({outcome.describe()})\n"
                + outcome.log_tail
            )
        site = env.site_packages()
        if bad := layers.frontend_in(site):
            raise layers.LayerError(f"the layer would contain the frontend ({', '.join(bad)})")
        dists = layers.layer_dists(site)
        if "torch" in dists:
            raise layers.LayerError("the layer would contain a torch of its own")
        if spec.host_deps:  # their own requirements are the host's to meet, and recorded
            problems = []
            host_sites = [torch.site_dir] if torch is not None else []
            left = layers.left_to_host(site, host_sites)
        else:
            problems = layers.check_env(
                env.python,
                [("the candidate", list(spec.requirements), set())],
                [*dists, "torch"] if check_torch else dists,
                box=job.box(ro=(tmp,)),
            )
            left = []
        if problems:
            raise layers.LayerError("dependency conflict: " + "; ".join(problems[:5]))
        # the layer is shared by runners whose torch lives elsewhere: each job's env points at
        # its own runner's torch, never at the one that happened to build the layer
        (site / envs.HOST_TORCH_PTH).unlink(missing_ok=True)
        doc = {"spec": spec.__dict__, "dists": dists, "built_s": time.monotonic() - start}
        if left:
            doc["left_to_host"] = left
        (tmp / "layer.json").write_text(json.dumps(doc, indent=1, default=list))
        layers.read_only(tmp)
        os.rename(tmp, root)
    except BaseException:
        layers.remove(tmp)
        raise
    return layers.Layer(root=root, spec=spec, built_s=time.monotonic() - start)


@dataclass
class WarmInstall:
    outcome: sandbox.Outcome
    layer: layers.Layer | None
    installer: str
    problems: list[str]


def install_warm(
    env: envs.CandidateEnv,
    wheel: Path,
    *,
    job: JobBox,
    layers_dir: Path,
    log_path: Path,
    timeout_s: float,
    index_url: str | None = None,
    wheelhouse: Path | None = None,
) -> WarmInstall:
    """The candidate alone (``--no-deps``) into ``env``, its dependencies from a shared layer.

    Raises ``LayerError`` when no layer can serve; the caller then installs the plain way.
    """
    meta = envs.read_wheel_metadata(wheel)
    installer = envs.choose_installer()
    layer = ensure_layer(
        meta,
        layers_dir=layers_dir,
        timeout_s=timeout_s,
        index_url=index_url,
        wheelhouse=wheelhouse,
        installer=installer,
        job=job,
    )
    if layer is not None:
        layers.attach(env.site_packages(), layer)
    cmd = envs.install_command(installer, env, [str(wheel.resolve())], no_deps=True)
    shown = (wheel, layer.root if layer else None)
    # the candidate's own wheel, --no-deps: nothing to fetch, so no network at all
    outcome = envs.run_installer(job, env, cmd, log_path, timeout_s, reads=shown, network=False)
    problems: list[str] = []
    if outcome.ok:  # asked of the candidate's environment, so in its sandbox (its .pth files run)
        also = [*(layers.layer_dists(layer.site_packages) if layer else []), "torch"]
        owner = (f"{meta.name} {meta.version}", list(meta.requires), set(envs.install_extras(meta)))
        box = job.box(ro=(layer.root,) if layer else ())
        problems = layers.check_env(env.python, [owner], also, box=box)
    return WarmInstall(outcome=outcome, layer=layer, installer=installer, problems=problems)
