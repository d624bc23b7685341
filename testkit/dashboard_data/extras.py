"""What ``seed_all`` leaves out and some pages need: a finished bisection between two builds of
develop (its steps stored in the order the search tested them, not commit order), and stage logs
for a build's jobs. Made-up rows, as the rest of this package's: no git mirror, no runner."""

from __future__ import annotations

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from core.transitions import ABSENT, PRESENT, Question
from core.wire import Stage
from service.models import (
    Bisection,
    BisectionStep,
    Build,
    FinishedReport,
    Job,
    StageLog,
    StageRow,
)

COMMITS = [f"{i:x}" * 40 for i in range(1, 8)]  # good..bad, oldest first: 111.., 222.., ...
LOG = (
    "Resolved 14 packages in 212ms\n"
    "Installed nvidia-cudnn-frontend==1.29.0 (layer torch 2.13.0+cpu, cutlass-dsl 4.8.1)\n"
    "probe: grouped_gemm_dsrelu_wrapper_sm100: signature has no 'deterministic'\n"
)


def seed_bisection(engine: Engine, good: int, bad: int) -> int:
    """A bisection of develop from build ``good`` to build ``bad`` that found its commit."""
    question = Question(
        rule="feature_regression",
        subject="grouped_gemm_dsrelu",
        check="feature_regression:grouped_gemm_dsrelu",
        good=ABSENT,
        bad=PRESENT,
        stages=[Stage.install, Stage.probe],
    )
    tested = [(3, "bad", PRESENT), (1, "good", ABSENT), (2, "bad", PRESENT)]  # search order
    with Session(engine) as session:
        first_bad = COMMITS[2]
        b = Bisection(
            repo="https://github.com/NVIDIA/cudnn-frontend.git",
            branch="develop",
            good_build_id=good,
            bad_build_id=bad,
            good_commit=COMMITS[0],
            bad_commit=COMMITS[-1],
            question=question.model_dump(mode="json"),
            commits=COMMITS[1:],
            state="finished",
            max_builds=8,
            outcome="found",
            candidates=[first_bad],
            first_bad={"sha": first_bad, "subject": "Drop the knob", "author": "dev"},
            reason=f"the first bad commit is {first_bad[:12]}",
        )
        b.steps = [
            BisectionStep(commit=COMMITS[i], mark=mark, detail=shows) for i, mark, shows in tested
        ]
        session.add(b)
        session.commit()
        return b.id


def seed_logs(engine: Engine, build_id: int) -> None:
    """A log for every stage of the build's jobs."""
    with Session(engine) as session:
        build = session.get(Build, build_id)
        assert build is not None
        jobs = session.scalars(select(Job).where(Job.build_id == build_id))
        for job in jobs:
            for stage in session.scalars(select(StageRow).where(StageRow.job_id == job.id)):
                text = f"[{job.kind} job {job.id}: {stage.name}]\n{LOG}"
                session.add(StageLog(build_id=build_id, job_id=job.id, stage=stage.name, text=text))
        session.commit()


def vary_wheels(engine: Engine, ids: dict[str, int]) -> list[int]:
    """Give every wheel build of ``ids`` a wheel of its own: a distinct version, and a long file
    name (a dev build's local version, two platform tags) that differs from the others only in
    its middle, as a nightly's do. Returns the ids of the wheel builds."""
    with Session(engine) as session:
        builds = session.scalars(select(Build).where(Build.id.in_(list(ids.values()))))
        changed = []
        for n, build in enumerate(sorted(builds, key=lambda b: b.id)):
            if build.source != "wheel" or build.version is None or "<" in build.version:
                continue
            version = f"1.{20 + n}.{n % 3}.dev2026{11 + n % 2:02d}{10 + n:02d}+g{n:07x}ab"
            build.version = version
            build.filename = (
                f"nvidia_cudnn_frontend-{version}-cp3{10 + n % 4}-cp3{10 + n % 4}-"
                "manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
            )
            changed.append(build.id)
        # a finished build's stored report still names its old wheel: made again on a read
        session.execute(delete(FinishedReport).where(FinishedReport.build_id.in_(changed)))
        session.commit()
        return changed
