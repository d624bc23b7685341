"""Compiling ahead: the deterministic arm's cached kernels compiled in a forked process.

A cold determinism stage compiles every kernel one after another in one interpreter. The CuTe DSL
compiles under the GIL, so threads do not overlap (``bench/cold_compile.py`` on the H200: the two
flex arms warmed up in two threads took 14.0 s, one after the other 12.9 s); processes do. The walk
compiles the knob-off arm first and the deterministic arm last, only at the config it chooses. A
subject whose kernels persist in the compile cache (its harness object's ``kernel_cache``: the
cache's subdirectory they land in) gets one process, forked before this process touches CUDA (a
CUDA context does not survive a fork), that builds the subject's smallest config and runs the
deterministic arm once: the kernels both arms share are compiled by whichever process reaches them
first and loaded by the other (the cache keeps one copy), and the deterministic arm's own kernels
are compiled while this process compiles the knob-off arm's. By the time the walk warms up the
deterministic arm, it loads them.

Measured on the H200: one forked process per arm, with the subject measured last, gained nothing
in a cold stage (30.9 s, ``docs/measurements/cold-ahead-per-arm-h200.json``: three processes
compiling the same plan kernels at once each ran slower). The deterministic arm alone beside the
walk took its warm-up (about 3 s) off the critical path (``det_sibling`` in
``docs/measurements/cold-compile-h200.json``).

Only in a cold cache (the subject's subdirectory holds no file): in a warm one there is nothing to
gain. A process still running when the stage ends is killed; what it compiled is the stage's, as if
the stage had compiled it.

A subject whose kernels the backend compiles in every process (its harness's
``compiled_per_process``: cuDNN's runtime-compiled engines, which persist nowhere across builds)
gets a process in every stage, warm or cold: it builds the subject's comparison point (the config
its walk tries first) and runs both arms once, while this process measures the subjects before it.
The CUDA driver's cache of the kernels it compiles, in the stage's HOME (one uid: the driver reused
only entries its own uid wrote, docs/measurements/gpu-stage-2026-12-05d.md), hands them to this
process. Nothing runs beside a timed comparison: the stage times its comparisons after every
subject's verdict, and ``quiet``, before the first, lets the processes end (killing any still
compiling after its wait).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("fe_ci.inside.ahead")

KNOBS = (True,)  # the deterministic arm: the one the walk warms up last


@dataclass
class Child:
    name: str
    knob: bool
    pid: int
    reads: int  # the pipe it reports on
    config: str | None = None  # asked for; the subject's smallest where it has no such config
    both: bool = False  # both arms (a subject compiled per process), not ``knob``'s alone

    @property
    def key(self) -> str:
        """Its seconds' name in the subject's timings."""
        return "ahead_s" if self.both else f"ahead_{'on' if self.knob else 'off'}_s"


@dataclass
class Ahead:
    """The processes compiling ahead, and what they said."""

    children: list[Child] = field(default_factory=list)
    said: dict[tuple[str, bool], dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, dict[str, Any]] = field(default_factory=dict)
    waited_s: float = 0.0  # how long ``quiet`` waited for them

    @property
    def names(self) -> set[str]:
        return {c.name for c in self.children}

    def quiet(self, wait_s: float = 0.0) -> None:
        """Let the processes building a subject compiled per process end, up to ``wait_s`` (what
        they compile is still to come); kill those still compiling, and those compiling a
        cached arm (by a timed comparison this process has warmed both arms itself); keep what
        they said (``timings``)."""
        t0 = time.monotonic()
        for child in self.children:
            done = 0
            while not done:
                done, _ = os.waitpid(child.pid, os.WNOHANG)
                if done or not child.both or time.monotonic() - t0 >= wait_s:
                    break
                time.sleep(0.02)
            if not done:
                log.info("ahead subject=%s knob=%s still compiling: killed", child.name, child.knob)
                _kill(child.pid)
            doc = self.said[(child.name, child.knob)] = _read(child.reads)
            seconds = doc.get("s") if doc.get("ok") else None
            self.timings.setdefault(child.name, {})[child.key] = seconds
        if self.children:
            self.waited_s += time.monotonic() - t0
        self.children = []

    def finish(self) -> dict[str, dict[str, Any]]:
        """End the processes (kill those still compiling); ``{subject: timings}`` they reported:
        ``ahead_off_s`` / ``ahead_on_s`` (``ahead_s``: both arms), the seconds each process
        took, None if killed or failed."""
        self.quiet(0.0)
        return self.timings


def cold(cache_dir: str | None, subdir: str) -> bool:
    """Whether ``subdir`` of the compile cache holds no file yet."""
    if not cache_dir:
        return False
    try:
        return not any(p.is_file() for p in (Path(cache_dir) / subdir).rglob("*"))
    except OSError:
        return False


def start(
    subjects: Iterable[tuple[str, Any]],
    cache_dir: str | None,
    device_type: str,
    at: Mapping[str, str] | None = None,
) -> Ahead:
    """Fork a process per arm in ``KNOBS`` for each ``(name, harness)`` whose ``kernel_cache`` is
    cold, and one for both arms at ``at[name]`` (its comparison point) for each whose harness is
    ``compiled_per_process``.

    Call before anything in this process touches ``device_type``'s runtime."""
    ahead = Ahead()
    for name, harness in subjects:
        if not harness.configs:
            continue
        if getattr(harness, "compiled_per_process", False):
            config = (at or {}).get(name)
            ahead.children.append(_fork(name, harness, True, device_type, config, both=True))
            continue
        subdir = getattr(harness, "kernel_cache", None)
        if not subdir or not cold(cache_dir, subdir):
            continue
        for knob in KNOBS:
            ahead.children.append(_fork(name, harness, knob, device_type))
    if ahead.children:
        log.info("ahead: %d processes compiling %s", len(ahead.children), sorted(ahead.names))
    return ahead


def _fork(
    name: str,
    harness: Any,
    knob: bool,
    device_type: str,
    config: str | None = None,
    both: bool = False,
) -> Child:
    reads, writes = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():  # torch's threads are idle here; the zygotes fork as well
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        os.close(writes)
        return Child(name, knob, pid, reads, config, both)
    os.close(reads)  # pragma: no cover (the child: its coverage is its report)
    arms = (False, True) if both else (knob,)  # pragma: no cover
    os._exit(_compile(name, harness, arms, device_type, config, writes))  # pragma: no cover


def _compile(
    name: str,
    harness: Any,
    arms: tuple[bool, ...],
    device_type: str,
    config: str | None,
    writes: int,
) -> int:
    """In the forked process: ``config`` (else the smallest) built and each arm run once, then
    report."""
    import torch

    from runner.inside.subjects.base import synchronize

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    t0 = time.perf_counter()
    chosen = next((c for c in harness.configs if c.name == config), harness.configs[0])
    doc: dict[str, Any] = {"name": name, "knob": arms[-1], "config": chosen.name}
    try:
        device = torch.device(device_type, 0) if device_type == "cuda" else torch.device("cpu")
        workload = harness.prepare(chosen, device)
        for knob in arms:
            workload.run(knob)
        synchronize(device)
        doc.update(ok=True, s=round(time.perf_counter() - t0, 3))
        log.info("ahead subject=%s arms=%s compiled in %.1f s", name, arms, doc["s"])
    except BaseException as exc:  # the stage compiles what this did not; say why, once
        doc.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        log.warning("ahead subject=%s arms=%s failed: %s", name, arms, doc["error"])
    try:
        os.write(writes, json.dumps(doc).encode()[:4096])
    finally:
        os.close(writes)
        sys.stdout.flush()
        sys.stderr.flush()
    return 0 if doc["ok"] else 1


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _read(fd: int) -> dict[str, Any]:
    """What a child wrote on its pipe (at most 4 KiB of JSON), or {} if nothing readable."""
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 4096)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        return {}
    return dict(doc) if isinstance(doc, Mapping) else {}
