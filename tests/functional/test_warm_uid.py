"""Warm workers tell the truth (``runner/isolation/zygotes.py``): a stage forked from a warm worker
runs as the worker's uid, which serves every job of its layer, not as the job's own; the report's
``sandbox`` says so. Two real jobs through one real warm worker, in the host's sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.isolation import jail, limits, zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit import frontend_repo as fr
from testkit import wheels

pytestmark = [
    pytest.mark.slow,  # a warm worker imports torch
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None,
        reason="a uid per job needs root (CI runs as root, with bubblewrap)",
    ),
]


def test_two_jobs_forked_from_one_warm_worker_are_said_to_share_its_uid(tmp_path: Path) -> None:
    init = fr.INIT.format(n=1, version="1.4.0", knob=", deterministic=None")
    wheel = wheels.make_wheel(tmp_path / "dist", "1.4.0", init)
    pool = zygotes.Zygotes(tmp_path / "zygotes", preload=("torch",))
    said, job_uids = [], []
    try:
        for name in ("first", "second"):
            opts = pipeline_options.Options(
                stages=[Stage.install, Stage.probe],
                work_dir=tmp_path / name,
                layers_dir=tmp_path / "layers",
                zygotes=pool,
                report_unselected=False,
            )
            pipe = pipeline.Pipeline(opts)
            job_uids.append(pipe.job().uid)
            result = pipe.run(wheel)
            probe = {s.name: s for s in result.stages}[Stage.probe]
            assert probe.status == Status.pass_, probe
            said.append(result.environment.sandbox)
        (worker,) = pool._live.values()
        assert worker.forks == 2  # both probes were forks of the one worker
    finally:
        pool.close()
    # the jobs had uids of their own, but the worker's uid ran both probes: the report says so
    assert worker.uid is not None and worker.uid not in job_uids and None not in job_uids
    assert jail.mechanism().uid_drop
    for text in said:
        assert text.startswith(jail.mechanism().describe()), text
        assert "uid shared: probe ran in a warm worker" in text, text


FILL_HOME = """\
import os, time
with open(os.path.join(os.environ["HOME"], "filler"), "wb") as fh:
    for _ in range(128):
        fh.write(b"x" * (1 << 20))
        fh.flush()
        time.sleep(0.002)
time.sleep(20)
"""


def test_a_warm_stage_filling_its_room_ends_error_naming_the_job_dir_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FE_CI_JOB_DIR_MB", "32")
    limits.wanted.cache_clear()
    pool = zygotes.Zygotes(tmp_path / "zygotes", preload=())
    try:
        opts = pipeline_options.Options(
            stages=[Stage.install, Stage.probe],
            work_dir=tmp_path / "job",
            layers_dir=tmp_path / "layers",
            zygotes=pool,
            report_unselected=False,
        )
        result = pipeline.Pipeline(opts).run(wheels.make_wheel(tmp_path / "d", "1.4.0", FILL_HOME))
        (worker,) = pool._live.values()
        assert worker.forks == 1  # the probe was a fork of the worker
    finally:
        pool.close()
        monkeypatch.undo()
        limits.wanted.cache_clear()
    probe = {s.name: s for s in result.stages}[Stage.probe]
    assert probe.status == Status.error, probe
    assert "job directory's size limit (32 MB) was reached" in probe.reason, probe
