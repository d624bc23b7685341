"""What the determinism stage does on this host, read from its parameters and the host itself.

``settings`` (the measuring settings), ``status_of`` (whether a subject runs here, and if not the
status and reason of its check: not in this build, a pinned config it lacks, no GPU, another GPU
family), ``start_configs`` (where each subject's config walk starts) and ``environment`` (the host
as the stage reports it). Standard library, torch and the candidate only.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

import torch

from core import harness
from core.comparable import pick_start_configs
from core.subjects import SUBJECTS, backend_too_old
from runner.inside import loaded
from runner.inside.measure import Settings
from runner.inside.subjects.base import knob_present


def settings(params: Mapping[str, Any]) -> Settings:
    """The measuring settings from the stage's parameters, with their defaults."""
    return Settings(
        repeats=max(int(params.get("repeats") or harness.REPEATS), 2),
        max_repeats=int(params.get("max_repeats") or harness.MAX_REPEATS),
        luck_target=float(params.get("luck_target") or harness.LUCK_TARGET),
        control_share=float(params.get("control_share") or harness.CONTROL_SHARE),
        negative_control=bool(params.get("negative_control")),
    )


def status_of(
    name: str,
    caps: Any,
    device: torch.device | None,
    family: str | None,
    pin: str | None,
    backend: str | None = None,
) -> tuple[str, str]:
    """("", "") when the subject runs here, else the status and reason of its check.
    ``backend``: this host's cuDNN backend version, held against the subject's ``min_backend``."""
    ok, why = _available(name, caps)
    if not ok:
        return "not_applicable", why
    pinned = _pin_problem(name, pin)
    if pinned:
        return "error", pinned
    if device is None:
        return "skipped", "no CUDA GPU on this host"
    if family not in SUBJECTS[name].families:
        return "skipped", f"needs {' or '.join(SUBJECTS[name].families)}"
    too_old = backend_too_old(SUBJECTS[name], backend)
    if too_old:
        return "skipped", too_old
    return "", ""


def _available(name: str, caps: Mapping[str, Any] | None) -> tuple[bool, str]:
    """Whether this build has the subject and its knob: the probe's answer, else a local look."""
    entry = SUBJECTS[name]
    cap = (caps or {}).get(name)
    if cap is None:
        return knob_present(entry.entry_point, entry.knob, entry.probe_method)
    if not cap.get("importable"):
        return (
            False,
            f"{entry.entry_point} is not importable: {cap.get('error') or 'import failed'}",
        )
    if not cap.get("present"):
        return False, f"this build's {entry.entry_point} has no '{entry.knob}'"
    return True, ""


def _pin_problem(name: str, pin: str | None) -> str:
    """Why ``--config`` cannot apply to this subject ("" when it can, or when none was given)."""
    if pin is None:
        return ""
    names = [c.name for c in SUBJECTS[name].load().configs]
    return "" if pin in names else f"{name} has no config {pin!r}; configs: {', '.join(names)}"


def start_configs(
    params: Mapping[str, Any], family: str | None, environment: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """``{subject: {"config", "build_id", ...}}``: where each subject's escalation starts.

    ``remembered`` (from the service's lease or ``--previous``) is matched against this host's GPU
    model and cuDNN backend; ``start_configs`` (``{subject: config}``) is used as given.
    """
    starts = pick_start_configs(
        params.get("remembered") or [],
        family=family,
        gpu=environment.get("gpu"),
        cudnn_backend=environment.get("cudnn_backend"),
    )
    for subject, config in (params.get("start_configs") or {}).items():
        if isinstance(config, str):
            starts[subject] = {"subject": subject, "config": config, "build_id": None}
    return starts


def comparison_points(params: Mapping[str, Any], family: str | None) -> dict[str, dict[str, Any]]:
    """``{subject: {"config", "series"}}``: where each subject's comparison is measured.

    ``comparison`` (the lease's pins, ``[{subject, family, config, series}]``) is kept for this
    host's family; a subject without one is compared at the config its walk chooses.
    """
    points: dict[str, dict[str, Any]] = {}
    for entry in params.get("comparison") or []:
        if not isinstance(entry, Mapping) or entry.get("family") != family:
            continue
        subject, config = entry.get("subject"), entry.get("config")
        if isinstance(subject, str) and isinstance(config, str):
            points[subject] = {"config": config, "series": entry.get("series")}
    return points


def environment(device: torch.device | None) -> dict[str, Any]:
    """The host as the stage reports it: Python, torch, the GPU and its arch, the cuDNN backend."""
    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    if device is not None:
        major, minor = torch.cuda.get_device_capability(device)
        env.update(gpu=torch.cuda.get_device_name(device), arch=f"sm_{major}{minor}")
    before = loaded.loaded_libcudnn()  # torch's, loaded with it
    try:
        import cudnn

        env["cudnn_backend"] = str(cudnn.backend_version_string())
    except Exception:  # the backend version is informative; its absence is not a failure
        version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env["cudnn_backend"] = str(version) if version else None
    env["libcudnn"] = loaded.by_loader(before, loaded.loaded_libcudnn())
    return env
