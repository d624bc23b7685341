"""Warm workers tell the truth (``runner/zygotes.py``): a stage forked from a warm worker runs as
the worker's uid, which serves every job of its layer, not as the job's own; the report's
``sandbox`` says so. Two real jobs through one real warm worker, in the host's sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner import jail, pipeline, pipeline_options, zygotes
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
