"""What the next build compares against: the deterministic arm's bytes, a sample, and its cost.

Standard library and torch only (runs inside the candidate's environment). Per subject the
determinism stage reports, at the chosen config:

- ``digests``: SHA-256 of each output's bytes in the deterministic arm (every run is byte-identical
  to run 0 when the arm passed, so one digest stands for the arm);
- ``sample``: a fixed strided sample of each output of the arm's first run (``SAMPLE_SIZE`` values
  at stride ``numel // SAMPLE_SIZE``, as float64), enough to give a lower bound of max |d| against
  the previous build without storing tensors;
- ``cost``: the median run time of each arm and their ratio, each run timed alone after the
  warm-up (CUDA events on a GPU; ``time.perf_counter`` around a synchronised run on CPU);
- ``comparable``: the fields that must match for two builds' bits and costs to be compared.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from core.comparable import ComparableKey

SAMPLE_SIZE = 128
T = TypeVar("T")


class RunTimer:
    """Times one call: CUDA events on a GPU (device time), ``perf_counter`` on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    @property
    def method(self) -> str:
        return "cuda_events" if self.cuda else "perf_counter"

    def time(self, fn: Callable[[], T]) -> tuple[T, float]:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, start.elapsed_time(end) / 1000.0
        began = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - began


def sample(t: torch.Tensor, size: int = SAMPLE_SIZE) -> dict[str, Any]:
    """A fixed strided sample of ``t``'s values in logical order; non-finite values are None."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    stride = max(1, n // size)
    picked = flat[torch.arange(0, n, stride, device=flat.device)[:size]]
    values = [v if math.isfinite(v) else None for v in picked.to(torch.float64).cpu().tolist()]
    return {"stride": stride, "numel": n, "values": values}


def cost(control_times: list[float], det_times: list[float], method: str) -> dict[str, Any]:
    """Median deterministic-arm run over median control-arm run, at one config."""
    if not control_times or not det_times:
        return {"timer": method, "ratio": None}
    control, det = statistics.median(control_times), statistics.median(det_times)
    return {
        "timer": method,
        "control_median_s": control,
        "deterministic_median_s": det,
        "ratio": det / control if control > 0 else None,
        "control_runs": len(control_times),
        "deterministic_runs": len(det_times),
    }


def inputs_id(module_file: str | None) -> str | None:
    """The subject module's source digest: its seeds and input construction live there."""
    if not module_file:
        return None
    return hashlib.sha256(Path(module_file).read_bytes()).hexdigest()[:16]


def comparable(
    subject: str, config: str, family: str | None, env: dict[str, Any], inputs: str | None
) -> dict[str, Any]:
    """What must match for two builds' deterministic bits and costs to be compared: the
    ``ComparableKey`` (GPU model and cuDNN backend normalised as for remembered configs) and the
    inputs' identity."""
    key = ComparableKey.of(
        subject,
        config,
        family or "",
        gpu=env.get("gpu"),
        torch=env.get("torch"),
        cudnn_backend=env.get("cudnn_backend"),
    )
    return {**key.as_dict(), "inputs": inputs}
