"""Every sandbox has limits (``runner/isolation/limits.py``): a candidate that forks without bound,
fills ``/dev/shm`` or fills its job directory ends its stage ``error`` naming the limit, and the
runner goes on with the next build. Real wheels through the real pipeline, in the host's sandbox
(bubblewrap here; CI installs it and runs as root, so the cgroup limits are in force there)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.isolation import jail, limits, sandbox, uids
from runner.pipeline import pipeline, pipeline_options
from testkit.wheels import make_wheel

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.geteuid() != 0,
    reason="needs bubblewrap or root for the candidate's sandbox (CI installs bwrap, runs as root)",
)

PIDS, TMP_MB, JOB_DIR_MB = 200, 16, 64

# Each swallows what the limit does to it and imports fine: only the runner can say it was hit.
FORK_BOMB = """\
import os, time
for _ in range(100000):
    try:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
    except OSError:
        break
"""

FILL_SHM = f"""\
try:
    with open("/dev/shm/fill", "wb") as fh:
        for _ in range(4 * {TMP_MB}):
            fh.write(b"x" * (1 << 20))
except OSError:
    pass
"""

FILL_JOB_DIR = f"""\
import time
with open("filler", "wb") as fh:
    for _ in range(4 * {JOB_DIR_MB}):
        fh.write(b"x" * (1 << 20))
        fh.flush()
        time.sleep(0.002)
time.sleep(20)
"""


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[limits.Limits]:
    monkeypatch.setenv("FE_CI_SANDBOX_PIDS", str(PIDS))
    monkeypatch.setenv("FE_CI_SANDBOX_TMP_MB", str(TMP_MB))
    monkeypatch.setenv("FE_CI_JOB_DIR_MB", str(JOB_DIR_MB))
    limits.wanted.cache_clear()
    jail.mechanism.cache_clear()
    yield limits.wanted()
    monkeypatch.undo()
    limits.wanted.cache_clear()
    jail.mechanism.cache_clear()


def _probe(tmp_path: Path, name: str, init_py: str, version: str) -> pipeline.Result:
    wheel = make_wheel(tmp_path / f"{name}-wheel", version, init_py)
    opts = pipeline_options.Options(
        stages=[Stage.install, Stage.probe],
        work_dir=tmp_path / name,
        report_unselected=False,
    )
    return pipeline.Pipeline(opts).run(wheel)


def _expected(what: str) -> str:
    if what == "pids" and limits.cgroups() is None:
        pytest.skip("no cgroup here: RLIMIT_NPROC holds the processes, unseen by the runner")
    return {
        "pids": f"process limit ({PIDS} processes) was reached",
        "shm": f"/dev/shm size limit ({TMP_MB} MB) was reached",
        "jobdir": f"job directory's size limit ({JOB_DIR_MB} MB) was reached",
    }[what]


@pytest.mark.parametrize(
    ("what", "attack"), [("pids", FORK_BOMB), ("shm", FILL_SHM), ("jobdir", FILL_JOB_DIR)]
)
def test_a_candidate_hitting_a_limit_ends_error_naming_it_and_the_runner_goes_on(
    tmp_path: Path, small_limits: limits.Limits, what: str, attack: str
) -> None:
    words = _expected(what)
    result = _probe(tmp_path, "hostile", attack, "1.32.0")
    probe = {s.name: s for s in result.stages}[Stage.probe]
    assert probe.status == Status.error, probe
    assert words in probe.reason, probe.reason
    assert str(tmp_path) not in probe.reason
    # the report names the limits in force
    assert f"tmp={TMP_MB}M" in result.environment.sandbox, result.environment.sandbox
    assert f"jobdir={JOB_DIR_MB}M" in result.environment.sandbox
    if limits.cgroups() is not None:
        assert f"pids={PIDS}" in result.environment.sandbox
    # the runner goes on: the next build, under the same limits, passes
    after = _probe(tmp_path, "genuine", "", "1.32.1")
    stages = {s.name: s for s in after.stages}
    assert stages[Stage.probe].status == Status.pass_, stages[Stage.probe]


def test_the_report_names_a_limit_the_host_cannot_give(
    monkeypatch: pytest.MonkeyPatch, small_limits: limits.Limits
) -> None:
    """A process group alone has no private tmpfs to size: ``tmp`` is named as missing."""
    monkeypatch.setenv("FE_CI_SANDBOX", "none")
    jail.mechanism.cache_clear()
    said = jail.isolation()
    assert "no tmp" in said and f"tmp={TMP_MB}M" not in said, said
    assert f"jobdir={JOB_DIR_MB}M" in said


@pytest.fixture(params=["bwrap", "unshare"])
def each_sandbox(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, small_limits: limits.Limits
) -> Iterator[str]:
    """Each way the runner builds a sandbox, where this host allows it (skipped, saying why)."""
    name = str(request.param)
    monkeypatch.setenv("FE_CI_SANDBOX", name)
    monkeypatch.setenv("FE_CI_SANDBOX_MEMORY_MB", "256")
    limits.wanted.cache_clear()
    jail.mechanism.cache_clear()
    if jail.mechanism().name != name:
        pytest.skip(f"{name} cannot make its sandbox here (got {jail.mechanism().describe()})")
    yield name
    monkeypatch.undo()
    limits.wanted.cache_clear()
    jail.mechanism.cache_clear()


GROW_MEMORY = """\
held = []
for _ in range(1024):
    held.append(bytearray(1 << 20))
"""


@pytest.mark.parametrize(
    ("what", "attack"),
    [("pids", FORK_BOMB), ("shm", FILL_SHM), ("jobdir", FILL_JOB_DIR), ("memory", GROW_MEMORY)],
)
def test_each_sandbox_stops_each_limit_and_names_it(
    tmp_path: Path, each_sandbox: str, what: str, attack: str
) -> None:
    if what == "memory" and limits.cgroups() is None:
        pytest.skip("no cgroup here: no memory limit, and the report says so")
    words = "memory limit (256 MB) was reached" if what == "memory" else _expected(what)
    with uids.UidRange.default().lease() as uid:
        own = tmp_path / "job" / "box"
        uids.hand_over(own, uid)
        jail.make_reachable(own)
        box = jail.Box(
            uid=uid,
            rw=(own,),
            ro=(own.parent, *jail.runner_paths()),
            hidden=jail.private_paths(),
            cwd=own,
        )
        out = sandbox.run(
            [sys.executable, "-c", attack],
            timeout_s=60,
            log_path=own.parent / "log",
            env={"PATH": os.defpath},
            grace_s=0.5,
            box=box,
        )
    assert out.status == "limit", out
    assert words in out.describe(), out
