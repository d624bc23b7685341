"""What makes two determinism results comparable across builds: the one place for those keys.

A config is remembered per ``ConfigKey`` (subject, family, GPU model, cuDNN backend): a config
chosen on an H200 with one cuDNN backend says nothing about another GPU or backend. A measurement
(the deterministic arm's digests, its run times) is comparable per ``ComparableKey``, which adds
the config and torch. Standard library only: the determinism stage matches remembered configs
inside the candidate's environment, where the GPU model and the backend are known for certain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

_DIGITS = re.compile(r"^\d+$")


def normalize_backend(value: object) -> str | None:
    """One spelling for a cuDNN backend version: ``91900`` and ``"9.19.0"`` are both ``9.19.0``.

    cuDNN 9 encodes ``major * 10000 + minor * 100 + patch``; cuDNN 8 ``major * 1000 + minor * 100
    + patch``. Anything else is kept as its stripped text.
    """
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        return None
    if _DIGITS.match(text):
        n = int(text)
        if n >= 90000:
            return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
        if n >= 1000:
            return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"
    return text


def normalize_gpu(value: object) -> str | None:
    """The GPU model as the driver names it, whitespace folded (``NVIDIA H200``)."""
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text or None


@dataclass(frozen=True)
class ConfigKey:
    """Where a chosen config is remembered: (subject, family, GPU model, cuDNN backend)."""

    subject: str
    family: str
    gpu: str | None
    cudnn_backend: str | None

    @classmethod
    def of(cls, subject: str, family: str, gpu: object, cudnn_backend: object) -> ConfigKey:
        return cls(subject, family, normalize_gpu(gpu), normalize_backend(cudnn_backend))


@dataclass(frozen=True)
class ComparableKey:
    """Two deterministic-arm results are comparable (digests, timings) only under the same key."""

    subject: str
    config: str
    family: str
    gpu: str | None
    torch: str | None
    cudnn_backend: str | None

    @classmethod
    def of(
        cls,
        subject: str,
        config: str,
        family: str,
        *,
        gpu: object,
        torch: object,
        cudnn_backend: object,
    ) -> ComparableKey:
        return cls(
            subject,
            config,
            family,
            normalize_gpu(gpu),
            str(torch) if torch else None,
            normalize_backend(cudnn_backend),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pick_start_configs(
    remembered: Iterable[Mapping[str, Any]],
    *,
    family: str | None,
    gpu: object,
    cudnn_backend: object,
) -> dict[str, dict[str, Any]]:
    """``{subject: remembered entry}`` for the entries whose key matches this host exactly.

    An entry is ``{"subject", "family", "gpu", "cudnn_backend", "config", "build_id"}``. An entry
    for another GPU model or backend is not used: its config was chosen on different kernels.
    """
    if family is None:
        return {}
    here = (normalize_gpu(gpu), normalize_backend(cudnn_backend))
    out: dict[str, dict[str, Any]] = {}
    for entry in remembered:
        subject = entry.get("subject")
        if not isinstance(subject, str) or not isinstance(entry.get("config"), str):
            continue
        key = ConfigKey.of(
            subject, str(entry.get("family")), entry.get("gpu"), entry.get("cudnn_backend")
        )
        if key.family == family and (key.gpu, key.cudnn_backend) == here:
            out[subject] = dict(entry)
    return out
