"""Compiling ahead (runner/inside/ahead.py): real forked processes, on CPU.

The subject here is a stand-in, because the ones it stands for (flex_attention_bwd, whose kernels
persist, and the cuDNN subjects, built ahead in every stage) need a CUDA GPU: its "compile" writes
one file per arm it runs, as the CuTe DSL exports a kernel, and can be made slow or broken. The
forks, the pipes, the wait and the kill of a process still compiling, and the cold/warm rule are
the real ones.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.inside import ahead, determinism
from runner.inside.subjects.base import Config


@dataclass
class CachedKernels:
    """A subject whose ``run`` leaves a "kernel" per arm in ``cache/<kernel_cache>``."""

    cache: Path
    kernel_cache: str | None = "kern"
    sleep_s: float = 0.0
    broken: bool = False
    name: str = "cached"
    configs: tuple[Config, ...] = (Config("small", {}), Config("large", {}))
    compiled_per_process: bool = False  # cuDNN's kind: built ahead in every stage

    def prepare(self, config: Config, device: torch.device) -> Any:
        if self.broken:
            raise RuntimeError("no such kernel")
        return _Workload(self, config)


@dataclass
class _Workload:
    subject: CachedKernels
    config: Config

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        time.sleep(self.subject.sleep_s)
        kernels = self.subject.cache / (self.subject.kernel_cache or "built")
        kernels.mkdir(parents=True, exist_ok=True)
        (kernels / f"{self.config.name}-{knob}.o").write_text(str(os.getpid()))
        return {}


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_a_cold_cache_gets_a_process_for_the_deterministic_arm(tmp_path: Path) -> None:
    subject = CachedKernels(tmp_path)
    early = ahead.start([("cached", subject)], str(tmp_path), "cpu")
    pids = [c.pid for c in early.children]
    assert [c.knob for c in early.children] == [True]  # the arm the walk warms up last
    assert os.getpid() not in pids
    deadline = time.monotonic() + 60  # until it has written its kernel and said so, and ended
    while time.monotonic() < deadline and not all(_exited(c.pid) for c in early.children):
        time.sleep(0.05)
    timings = early.finish()
    # the smallest config, each arm in its own process (not this one)
    kernels = {p.name: p.read_text() for p in (tmp_path / "kern").glob("*.o")}
    assert set(kernels) == {"small-True.o"}
    assert set(kernels.values()) == {str(p) for p in pids}
    assert set(timings) == {"cached"}
    assert isinstance(timings["cached"]["ahead_on_s"], float)
    assert all(_gone(p) for p in pids)  # reaped: no zombie left to the stage
    assert early.children == []


def test_a_warm_cache_or_a_subject_without_cached_kernels_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "kern").mkdir()
    (tmp_path / "kern" / "old.o").write_text("")
    assert ahead.start([("cached", CachedKernels(tmp_path))], str(tmp_path), "cpu").children == []
    plain = CachedKernels(tmp_path / "other", kernel_cache=None)
    assert ahead.start([("plain", plain)], str(tmp_path / "other"), "cpu").children == []
    assert ahead.start([("cached", CachedKernels(tmp_path))], None, "cpu").children == []
    assert ahead.Ahead().finish() == {}


def test_a_process_still_compiling_at_the_end_is_killed_and_says_nothing(tmp_path: Path) -> None:
    early = ahead.start([("cached", CachedKernels(tmp_path, sleep_s=60))], str(tmp_path), "cpu")
    pids = [c.pid for c in early.children]
    timings = early.finish()
    assert timings == {"cached": {"ahead_on_s": None}}
    assert all(_gone(p) for p in pids)
    assert not list((tmp_path / "kern").glob("*.o"))  # killed mid-sleep: waited for, it would write


def test_a_process_that_fails_says_why_and_reports_no_time(tmp_path: Path) -> None:
    early = ahead.start([("cached", CachedKernels(tmp_path, broken=True))], str(tmp_path), "cpu")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_exited(c.pid) for c in early.children):
        time.sleep(0.05)
    assert early.finish() == {"cached": {"ahead_on_s": None}}
    for knob in ahead.KNOBS:
        said = early.said[("cached", knob)]
        assert said["ok"] is False and said["error"] == "RuntimeError: no such kernel"


def test_a_subject_compiled_per_process_is_built_ahead_warm_or_cold_at_its_point(
    tmp_path: Path,
) -> None:
    """Both arms, at the comparison point, in a cache that is warm (or with none at all)."""
    (tmp_path / "kern").mkdir()
    (tmp_path / "kern" / "old.o").write_text("")
    per = CachedKernels(tmp_path, kernel_cache=None, compiled_per_process=True, name="cudnn")
    early = ahead.start([("cudnn", per)], str(tmp_path), "cpu", {"cudnn": "large"})
    (pid,) = [c.pid for c in early.children]
    early.quiet(60.0)  # waits for it: nothing killed
    built = {p.name: p.read_text() for p in (tmp_path / "built").glob("*.o")}
    assert built == {"large-False.o": str(pid), "large-True.o": str(pid)}
    assert isinstance(early.timings["cudnn"]["ahead_s"], float) and early.waited_s > 0
    assert early.children == [] and _gone(pid) and early.finish() == early.timings
    # a point it does not have: its smallest config; no cache directory: built all the same
    other = ahead.start([("cudnn", per)], None, "cpu", {"cudnn": "gone"})
    other.quiet(60.0)
    assert other.said[("cudnn", True)]["config"] == "small"


def test_quiet_kills_what_is_still_compiling_after_its_wait(tmp_path: Path) -> None:
    per = CachedKernels(tmp_path, kernel_cache=None, sleep_s=60, compiled_per_process=True)
    early = ahead.start([("per", per)], None, "cpu")
    pids = [c.pid for c in early.children]
    early.quiet(0.2)
    assert early.timings == {"per": {"ahead_s": None}} and all(_gone(p) for p in pids)
    # a cached arm's process is not waited for: by a timed comparison the stage has both arms
    cached = CachedKernels(tmp_path / "cold", sleep_s=5)
    late = ahead.start([("cached", cached)], str(tmp_path / "cold"), "cpu")
    late.quiet(60.0)  # waited for, it would have written its kernel and said so within 5 s
    assert late.timings == {"cached": {"ahead_on_s": None}}
    assert not list(tmp_path.rglob("*.o"))


def _exited(pid: int) -> bool:
    """Ended and not yet reaped (a zombie): what ``finish`` reaps without killing."""
    return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()


CUDNN = {"sdpa_bwd", "sdpa_torch_bwd", "sdpa_torch_thd_bwd", "sdpa_provider_bwd"}


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"family": None}, set()),  # a CPU job: nothing is forked
        ({"family": "sm_90"}, set()),  # no probe answer: the candidate is not imported first
        ({"family": "sm_90", "compile_ahead": False}, set()),
        # flex's kernels persist (cold cache here); cuDNN's are compiled in every process
        ({"family": "sm_90", "capabilities": "all"}, {"flex_attention_bwd", *CUDNN}),
        ({"family": "sm_80", "capabilities": "all"}, {"sdpa_bwd"}),  # flex: sm_90 and sm_100
    ],
)
def test_the_stage_compiles_ahead_only_what_it_will_run_on_its_family(
    tmp_path: Path, params: dict[str, Any], expected: set[str]
) -> None:
    """The real stage's choice; here the flex processes cannot compile (no CUDA): no times."""
    names = list(determinism.SUBJECTS)
    if params.get("capabilities") == "all":
        params["capabilities"] = {n: {"importable": True, "present": True} for n in names}
    early = determinism._compile_ahead(names, params, str(tmp_path))
    assert early.names == expected
    timings = early.finish()
    assert set(timings) == expected
    for name, seconds in timings.items():
        assert seconds == {"ahead_s" if name in CUDNN else "ahead_on_s": None}


def test_the_stage_reports_its_process_compiling_ahead(tmp_path: Path) -> None:
    """The whole stage on this host: flex's process is forked and ended, and its time reported
    (none: it cannot compile without CUDA); the subject itself is skipped here, as without it."""
    caps = {"flex_attention_bwd": {"importable": True, "present": True}}
    doc = determinism.run(
        {
            "family": "sm_90",
            "capabilities": caps,
            "subjects": ["flex_attention_bwd"],
            "compile_only": False,
            "compile_cache_dir": str(tmp_path / "cache"),
        }
    )
    assert doc["timings"]["stage"]["ahead_processes"] == 1
    assert doc["timings"]["flex_attention_bwd"] == {"ahead_on_s": None}
    assert [c["status"] for c in doc["checks"]] == ["skipped"]
