"""The measuring parts of bench/gpu_surface.py: arms, byte comparison, the torch flag, deadlines.

Standard library and torch only. Every measurement is one record (a dict that becomes JSON): what
was called, at which config, in which arm, how many runs differed from run 0 by bytes and by how
much, how long it took, and the exception (type and message) where one was raised.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from runner.inside.subjects.attention import attention_reference  # noqa: F401 (re-exported)

Outputs = dict[str, torch.Tensor]

FLAG_MODES = ("off", "on", "warn_only")


@contextlib.contextmanager
def torch_flag(mode: str) -> Iterator[None]:
    """``torch.use_deterministic_algorithms`` set to ``mode``, put back as found on the way out.

    ``off``: the flag off; ``on``: on; ``warn_only``: on with ``warn_only=True``. The flag and its
    warn-only setting are restored also when the body raises.
    """
    if mode not in FLAG_MODES:
        raise ValueError(f"flag mode must be one of {FLAG_MODES}, got {mode!r}")
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.use_deterministic_algorithms(mode != "off", warn_only=mode == "warn_only")
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)


class Deadline:
    """A monotonic time limit; ``passed()`` once it is reached."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end


def error_of(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)[:800]}


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(-1).view(torch.uint8)


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over finite pairs (float), ``nan`` where either side has a NaN."""
    d = (a.detach().double() - b.detach().double()).abs()
    if torch.isnan(d).any():
        return math.nan
    return float(d.max()) if d.numel() else 0.0


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape != b.shape or not torch.equal(_bytes(a), _bytes(b))


def measure_arm(
    run: Callable[[], Outputs], runs: int, deadline: Deadline, *, flag: str | None = None
) -> tuple[dict[str, Any], Outputs]:
    """``runs`` calls of ``run`` (each under the torch flag ``flag`` when given, restored after
    each run), every run's outputs compared with run 0's by bytes. Returns the record and run 0's
    outputs (for comparing arms). Stops early, after two runs at least, at the deadline."""
    rec: dict[str, Any] = {"flag": flag, "runs": 0, "runs_differing": 0, "outputs": {}}
    first: Outputs = {}
    seen: dict[str, int] = {}
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(runs):
            if i >= 2 and deadline.passed():
                rec["stopped"] = "deadline"
                break
            with torch_flag(flag) if flag else contextlib.nullcontext():
                out = run()
            torch.cuda.synchronize()
            rec["runs"] += 1
            if i == 0:
                first = {name: t.detach().clone() for name, t in out.items()}
                for name, t in first.items():
                    rec["outputs"][name] = {
                        "runs_differing": 0,
                        "max_abs_diff": 0.0,
                        "nan": bool(torch.isnan(t.float()).any()),
                    }
                continue
            any_diff = False
            for name, t in out.items():
                o = rec["outputs"][name]
                if differs(first[name], t):
                    any_diff = True
                    o["runs_differing"] += 1
                    m = max_abs(first[name], t)
                    o["max_abs_diff"] = m if math.isnan(m) else max(o["max_abs_diff"], m)
            rec["runs_differing"] += int(any_diff)
        for w in caught:
            key = f"{w.category.__name__}: {str(w.message)[:300]}"
            seen[key] = seen.get(key, 0) + 1
    rec["warnings"] = [{"warning": k, "count": n} for k, n in list(seen.items())[:5]]
    rec["seconds"] = round(time.monotonic() - t0, 3)
    return rec, first


def compare_first(a: Outputs, b: Outputs) -> dict[str, Any]:
    """Run 0 of one arm against run 0 of another: bytes equal per output, and max |d|."""
    return {
        name: {"differs": differs(a[name], b[name]), "max_abs_diff": max_abs(a[name], b[name])}
        for name in a
        if name in b
    }


def against_reference(got: Outputs, ref: Outputs) -> dict[str, float]:
    """max |got - ref| per output, the reference in float32."""
    return {name: max_abs(got[name].float(), ref[name]) for name in got if name in ref}


def record(
    results: list[dict[str, Any]],
    entry_point: str,
    config: str,
    arm: str,
    fn: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run ``fn`` for one measurement and append its record, timed; an exception becomes the
    record's ``error`` (type and message) and the measurements go on."""
    rec: dict[str, Any] = {"entry_point": entry_point, "config": config, "arm": arm}
    t0 = time.monotonic()
    try:
        rec.update(fn())
    except Exception as exc:
        rec["error"] = error_of(exc)
    rec["seconds"] = round(time.monotonic() - t0, 3)
    results.append(rec)
    return rec


def record_error(
    results: list[dict[str, Any]], entry_point: str, config: str, arm: str, exc: BaseException
) -> None:
    """A record for a step that raised before any measurement of its config could start."""
    results.append(
        {
            "entry_point": entry_point,
            "config": config,
            "arm": arm,
            "seconds": 0.0,
            "error": error_of(exc),
        }
    )


def expect_raise(fn: Callable[[], object], expected: type[BaseException]) -> dict[str, Any]:
    """Call ``fn`` and say what it did: raised (which type, the message), or ran; whether that is
    the ``expected`` exception type. Warnings raised on the way are listed."""
    out: dict[str, Any] = {"expected": expected.__name__}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
            torch.cuda.synchronize()
            out.update(raised=None, ran=True)
        except Exception as exc:
            out.update(raised=error_of(exc), ran=False)
    out["as_expected"] = out["raised"] is not None and out["raised"]["type"] == expected.__name__
    out["warnings"] = [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught][:5]
    return out


Results = list[dict[str, Any]]


class Ctx:
    """What every section gets: where records go, runs per arm, its deadline, the device."""

    def __init__(self, results: Results, runs: int, deadline: Deadline) -> None:
        self.results, self.runs, self.deadline = results, runs, deadline
        self.device = torch.device("cuda")

    def randn(self, *shape: int, seed: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        gen = torch.Generator(device=self.device).manual_seed(seed)
        return torch.randn(*shape, generator=gen, device=self.device).to(dtype)


def arms(ctx: Ctx, ep: str, cfg: str, run: Callable[[bool], Outputs], ref: Outputs | None) -> None:
    """A knob passed as an argument: control (False) and deterministic (True), compared."""
    firsts: dict[str, Outputs] = {}
    for arm, knob in (("control", False), ("deterministic", True)):

        def one(knob: bool = knob, arm: str = arm) -> dict[str, Any]:
            rec, firsts[arm] = measure_arm(lambda: run(knob), ctx.runs, ctx.deadline)
            if ref is not None:
                rec["max_abs_err_vs_fp32"] = against_reference(firsts[arm], ref)
            if arm == "deterministic" and "control" in firsts:
                rec["run0_vs_control_run0"] = compare_first(firsts["control"], firsts[arm])
            return rec

        record(ctx.results, ep, cfg, arm, one)


def flag_arms(ctx: Ctx, ep: str, cfg: str, run: Callable[[], Outputs], ref: Outputs | None) -> None:
    """The knob is the torch flag: off, on, and on with warn_only, each run under it."""
    firsts: dict[str, Outputs] = {}
    for arm in ("off", "on", "warn_only"):

        def one(arm: str = arm) -> dict[str, Any]:
            rec, firsts[arm] = measure_arm(run, ctx.runs, ctx.deadline, flag=arm)
            if ref is not None:
                rec["max_abs_err_vs_fp32"] = against_reference(firsts[arm], ref)
            if arm != "off" and "off" in firsts:
                rec["run0_vs_control_run0"] = compare_first(firsts["off"], firsts[arm])
            if arm == "warn_only" and "on" in firsts:
                rec["run0_vs_flag_on_run0"] = compare_first(firsts["on"], firsts[arm])
            return rec

        record(ctx.results, ep, cfg, f"flag_{arm}", one)
    record(
        ctx.results,
        ep,
        cfg,
        "flag_after",
        lambda: {"flag_restored_off": not torch.are_deterministic_algorithms_enabled()},
    )
