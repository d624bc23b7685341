"""Seeding a database: the runners, then each scenario once (``seed_all``, for the browser tests)
or cycled by the thousand (``seed_many``, for the benchmarks). Verdicts come from the service's own
rule (``events.job_changed``), computed once per scenario and copied to its repeats.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.config import Settings
from service.models import Build, Runner, utcnow
from service.results.events import Reactions, job_changed
from testkit.dashboard_data.rows import Ctx, Seeder
from testkit.dashboard_data.scenarios import SCENARIOS, scenario_pass


def seed_runners(s: Seeder, now: datetime) -> dict[str, int]:
    specs = {
        "ci-cpu-1": ({}, now - timedelta(seconds=5), None),
        "h200-a": (
            {"arch": "sm_90", "gpu": "NVIDIA H200", "cc": "9.0", "driver": "570.86.15"},
            now - timedelta(seconds=12),
            None,
        ),
        "builder-1": ({"builder": "true"}, now - timedelta(seconds=20), None),
        "b200-old": (
            {"arch": "sm_100", "gpu": "NVIDIA B200", "cc": "10.0", "driver": "575.51.03"},
            now - timedelta(days=2),
            None,
        ),
        "retired-1": (
            {"arch": "sm_80", "gpu": "NVIDIA A100-SXM4-80GB"},
            now - timedelta(days=30),
            now - timedelta(days=29),
        ),
    }
    out = {}
    for name, (labels, seen, revoked) in specs.items():
        out[name] = s.add(
            Runner,
            name=name,
            labels=labels,
            family=labels.get("arch"),
            builder=labels.get("builder") == "true",
            token_hash=hashlib.sha256(f"runner-{name}".encode()).hexdigest(),
            revoked_at=revoked,
            created_at=now - timedelta(days=40),
            last_seen_at=seen,
        )
    return out


def refresh(engine: Engine, build_ids: list[int]) -> dict[int, tuple[str, str]]:
    """Store each build's verdict by the service's rule; returns (verdict, reason) by id."""
    out = {}
    reactions = Reactions(Settings())
    with Session(engine) as session:
        for build_id in build_ids:
            job_changed(session, build_id, reactions)
            build = session.get(Build, build_id)
            assert build is not None
            out[build_id] = (build.verdict, build.verdict_reason)
        session.commit()
    return out


def seed_all(
    engine: Engine,
    *,
    history: int = 8,
    now: datetime | None = None,
    lease: timedelta = timedelta(minutes=2),
) -> dict[str, int]:
    """Runners, ``history`` older passing builds (for the trends) and one build per scenario;
    a leased job's lease runs ``lease`` from its build's time (longer keeps the sweeper from
    requeueing it while a test reads it)."""
    now = now or utcnow()
    s = Seeder.for_engine(engine)
    runners = seed_runners(s, now)
    ids: dict[str, int] = {}
    for i in range(history):
        c = Ctx(s, now - timedelta(hours=history - i), runners, variant=i)
        ids[f"history{i}"] = scenario_pass(c)
    for n, (name, make) in enumerate(SCENARIOS.items()):
        at = now - timedelta(minutes=len(SCENARIOS) - n)
        ids[name] = make(Ctx(s, at, runners, variant=n, lease=lease))
    s.flush(engine)
    refresh(engine, list(ids.values()))
    return ids


def seed_many(engine: Engine, count: int, *, batch: int = 500) -> int:
    """``count`` builds cycling through the scenarios, oldest first; returns the newest id.

    Their leases and GPU waits run from the real time, so the service's sweeper does not end
    thousands of week-old jobs while a benchmark runs."""
    now = utcnow()
    s = Seeder.for_engine(engine)
    runners = seed_runners(s, now)
    s.flush(engine)
    names = list(SCENARIOS)
    verdicts: dict[str, tuple[str, str]] = {}
    last = 0
    for start in range(0, count, batch):
        made: dict[int, str] = {}
        for i in range(start, min(count, start + batch)):
            name = names[i % len(names)]
            c = Ctx(s, now - timedelta(minutes=count - i), runners, i, timedelta(days=1), now)
            made[SCENARIOS[name](c)] = name
        if verdicts:
            for row in s.rows[Build]:
                verdict, reason = verdicts[made[row["id"]]]
                row["verdict"], row["verdict_reason"] = verdict, reason
        s.flush(engine)
        if not verdicts:
            firsts = {name: build_id for build_id, name in reversed(made.items())}
            got = refresh(engine, list(firsts.values()))
            verdicts = {name: got[build_id] for name, build_id in firsts.items()}
            with Session(engine) as session:
                for build_id, name in made.items():
                    build = session.get(Build, build_id)
                    assert build is not None
                    build.verdict, build.verdict_reason = verdicts[name]
                session.commit()
        last = max(made)
    return last
