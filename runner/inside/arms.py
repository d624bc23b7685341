"""Comparing runs byte for byte, and the two arms that repeat one workload's backward.

An output's bytes are read through ``t.contiguous().view(torch.uint8)``, so -0.0 and +0.0 differ
and a NaN can never read as "stable". Each run of an arm is compared with run 0 on the device
(``same_bytes``). Run 0's outputs are digested on the host (SHA-256, ``digest``: what the next
build compares against); an output that differs from run 0 is told apart from the others on the
device (``fingerprint``), never copied to the host: a control arm varies in most of its runs, and
copying and hashing its outputs cost more than running it (about 1.8 s of the sdpa control's 1.9 s
at b4 s2048 on the H200). ``run_control`` runs the knob-off
arm a fixed number of times; ``run_deterministic`` runs the knob-on arm until the luck target is
met, the cap is hit, or the arm has already failed (``stats``).

Standard library and torch only.
"""

from __future__ import annotations

import ctypes
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from runner.inside import bits, stats
from runner.inside.documents import DriftDoc
from runner.inside.subjects.base import Config, Workload, synchronize


def digest(t: torch.Tensor) -> str:
    """SHA-256 of the tensor's bytes in logical order (a uint8 view of a contiguous copy)."""
    raw = t.detach().contiguous().view(torch.uint8).reshape(-1).cpu()
    if raw.numel() == 0:
        return hashlib.sha256(b"").hexdigest()
    buf = (ctypes.c_ubyte * raw.numel()).from_address(raw.data_ptr())
    return hashlib.sha256(memoryview(buf)).hexdigest()


# Outputs on these devices are hashed where they are (SHA-256 of host memory is about 10x cheaper
# than the device-style fingerprint run on a CPU); elsewhere a differing output is fingerprinted.
HOST_DEVICES = frozenset({"cpu"})
FINGERPRINT_CHUNK = 1 << 22  # 32-bit words per device-side reduction: bounds its scratch memory
_MASK = (1 << 64) - 1
_weights: dict[torch.device, torch.Tensor] = {}


def _fingerprint_weights(device: torch.device) -> torch.Tensor:
    """Two rows of fixed pseudo-random odd int64 weights, one per word of a chunk (made once)."""
    if device not in _weights:
        gen = torch.Generator(device="cpu").manual_seed(0x5EED)
        rows = torch.randint(-(1 << 62), 1 << 62, (2, FINGERPRINT_CHUNK), generator=gen)
        _weights[device] = (rows | 1).to(device)
    return _weights[device]


def fingerprint(t: torch.Tensor) -> str:
    """128 bits of the tensor's bytes in logical order, computed where the tensor is.

    Two position-weighted sums of its 32-bit words (wrapping in int64), chunk by chunk, combined
    on the host: different bytes give a different fingerprint except by a chance of about 2^-64
    per pair. It tells the varying runs of an arm apart (``distinct``); what crosses builds is
    ``digest``."""
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
    n = raw.numel()
    if n % 4 or raw.storage_offset() % 4:  # whole, aligned 32-bit words
        raw = torch.cat([raw, raw.new_zeros(-n % 4)])
    words = raw.view(torch.int32)
    weights = _fingerprint_weights(words.device)
    sums = [
        (
            words[lo : lo + FINGERPRINT_CHUNK].to(torch.int64)
            * weights[:, : min(FINGERPRINT_CHUNK, words.numel() - lo)]
        ).sum(dim=1)
        for lo in range(0, words.numel(), FINGERPRINT_CHUNK)
    ]
    a = b = n
    if sums:
        for lo_hash, hi_hash in torch.stack(sums).tolist():  # one copy to the host
            a = (a * 0x100000001B3 + lo_hash) & _MASK
            b = (b * 0xC2B2AE3D27D4EB4F + hi_hash) & _MASK
    return f"fp:{a:016x}{b:016x}"


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same bytes (compared where they are, without a host copy)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    flat_a = a.detach().contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(flat_a, b.detach().contiguous().reshape(-1).view(torch.uint8)))


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| over positions where both are finite (NaN/inf are reported apart)."""
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    both = torch.isfinite(a64) & torch.isfinite(b64)
    if not bool(both.any()):
        return 0.0
    return float((a64 - b64).abs()[both].max())


@dataclass
class OutputDrift:
    digests: list[str] = field(default_factory=list)
    differing: int = 0
    max_abs_diff: float = 0.0
    finite: bool = True
    first_nonfinite_run: int | None = None


@dataclass
class Arm:
    """The runs of one arm on one workload: digests per output, and what differed from run 0."""

    name: str
    knob: bool
    outputs: dict[str, OutputDrift] = field(default_factory=dict)
    first: dict[str, torch.Tensor] = field(default_factory=dict)
    runs: int = 0
    varying_runs: int = 0  # runs (after run 0) in which any output differed from run 0
    run_s: float = 0.0
    times: list[float] = field(default_factory=list)  # each run alone, by ``timer``
    timer: str = "perf_counter"
    stopped_by: str | None = None
    luck_probability: float | None = None

    @property
    def comparisons(self) -> int:
        return max(self.runs - 1, 0)

    @property
    def finite(self) -> bool:
        return all(o.finite for o in self.outputs.values())

    @property
    def share(self) -> float:
        return self.varying_runs / self.comparisons if self.comparisons else 0.0

    def add(self, outs: Mapping[str, torch.Tensor]) -> None:
        varied = False
        for name, t in outs.items():
            drift = self.outputs.setdefault(name, OutputDrift())
            # run 0 is digested on the host; a later run has run 0's digest when its bytes are
            # the same, and when they differ a fingerprint made on the device (GPU outputs)
            if self.runs == 0:
                drift.digests.append(digest(t))
            elif same_bytes(t, self.first[name]):
                drift.digests.append(drift.digests[0])
            elif t.device.type in HOST_DEVICES:
                drift.digests.append(digest(t))
            else:
                drift.digests.append(fingerprint(t))
            if not bool(torch.isfinite(t).all()):
                if drift.finite:
                    drift.first_nonfinite_run = self.runs
                drift.finite = False
            if self.runs == 0:
                self.first[name] = t.detach().clone()
            elif drift.digests[-1] != drift.digests[0]:
                drift.differing += 1
                drift.max_abs_diff = max(drift.max_abs_diff, _max_abs_diff(t, self.first[name]))
                varied = True
        self.varying_runs += int(varied)
        self.runs += 1

    def run_once(self, workload: Workload, device: torch.device, back_to_back: int = 1) -> None:
        """One run, or ``back_to_back`` runs timed together (``times`` gets their mean): the
        last run's outputs are the ones compared and digested."""
        timer = bits.RunTimer(device)
        synchronize(device)
        start = time.perf_counter()
        outs, took = timer.time(lambda: repeated(workload, self.knob, back_to_back))
        synchronize(device)
        self.run_s += time.perf_counter() - start
        self.times.append(took / back_to_back)
        self.timer = timer.method
        self.add(outs)

    def drift_rows(self, subject: str, config: Config) -> list[DriftDoc]:
        return [
            {
                "subject": subject,
                "output": name,
                "arm": self.name,
                "runs": self.runs,
                "differing": o.differing,
                "distinct": len(set(o.digests)),
                "max_abs_diff": o.max_abs_diff,
                "finite": o.finite,
                "config": config.describe(),
                "luck_probability": self.luck_probability,
                "stopped_by": self.stopped_by,
            }
            for name, o in self.outputs.items()
        ]


def repeated(workload: Workload, knob: bool, runs: int) -> Mapping[str, torch.Tensor]:
    """``runs`` runs back to back; the last one's outputs (each run's are dropped as the next
    starts, so memory holds one run's at a time)."""
    outs = workload.run(knob)
    for _ in range(runs - 1):
        del outs
        outs = workload.run(knob)
    return outs


def run_control(workload: Workload, device: torch.device, runs: int) -> Arm:
    arm = Arm("control", knob=False, stopped_by="repeats")
    for _ in range(runs):
        arm.run_once(workload, device)
    return arm


def run_deterministic(
    workload: Workload,
    device: torch.device,
    *,
    p_lo: float,
    repeats: int,
    max_repeats: int,
    luck_target: float,
    knob: bool = True,
) -> Arm:
    """Run until the luck target is met, the cap is hit, or the arm is already a failure."""
    arm = Arm("deterministic", knob=knob)
    needed = stats.comparisons_needed(p_lo, luck_target)
    planned = repeats if needed is None else max(repeats, needed + 1)
    planned = min(planned, max(max_repeats, 2))
    while arm.runs < planned:
        arm.run_once(workload, device)
        if not arm.finite:
            arm.stopped_by = "non_finite"
            break
        if arm.varying_runs and arm.runs >= min(repeats, planned):
            arm.stopped_by = "varied"
            break
    arm.luck_probability = stats.luck_probability(p_lo, arm.comparisons)
    if arm.stopped_by is None:
        if p_lo <= 0.0:
            arm.stopped_by = "control_steady"
        elif arm.luck_probability < luck_target:
            arm.stopped_by = "luck_target"
        else:
            arm.stopped_by = "max_repeats"
    return arm
