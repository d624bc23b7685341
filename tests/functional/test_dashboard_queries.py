"""``/trends`` and ``/runners`` read only what they show, whatever the number of builds.

Each page's queries are captured as the service's code issues them on a real SQLite file, and
SQLite's own ``EXPLAIN QUERY PLAN`` must show them searching an index by the shown builds or
runners, never scanning a table's every row. The runners page is also read over HTTP from a real
service, with more leased jobs per runner than it lists.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from core.subjects import SUBJECTS
from service.config import Settings
from service.db import make_engine
from service.models import Job, Runner, utcnow
from service.web import runners, trend_axis, trends
from testkit import loopback
from testkit.dashboard_data import seed_all
from testkit.dashboard_data.rows import Ctx, Seeder
from testkit.dashboard_data.scenarios import scenario_running
from testkit.service import Service, service_env

EXTRA_RUNNING = 5  # builds each holding a leased CPU job (ci-cpu-1) and GPU job (h200-a)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, Engine]]:
    data: Path = tmp_path_factory.mktemp("pages") / "data"
    svc = Service(data_dir=data, env=service_env(data)).start()  # migrates the file to head
    engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
    try:
        seed_all(engine, history=4)
        with engine.connect() as conn:
            names = {name: i for name, i in conn.execute(select(Runner.name, Runner.id))}
        s = Seeder.for_engine(engine)
        for i in range(EXTRA_RUNNING):
            scenario_running(Ctx(s, utcnow(), names, variant=1000 + i))
        s.flush(engine)
        yield svc, engine
    finally:
        engine.dispose()
        svc.stop()


def plans(engine: Engine, run: Callable[[Session], Any]) -> list[tuple[str, list[str]]]:
    """Each SELECT that ``run`` issues, in order, with SQLite's plan for it (a line per step)."""
    issued: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            issued.append((statement, params))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        with Session(engine) as session:
            run(session)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    out = []
    with engine.connect() as conn:
        for statement, params in issued:
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
            out.append((" ".join(statement.split()), [str(row[-1]) for row in rows]))
    return out


def _full_scans(found: list[tuple[str, list[str]]], *tables: str) -> list[str]:
    """Plan steps that read a whole table (a SCAN of one of ``tables``, index or not)."""
    return [
        step
        for _, steps in found
        for step in steps
        if any(re.match(rf"SCAN {t}\b", step) for t in tables)
    ]


def test_trends_reads_each_subjects_control_arm_by_the_shown_builds(
    seeded: tuple[Service, Engine],
) -> None:
    _, engine = seeded

    def read(session: Session) -> None:
        ids = trend_axis.recent_builds(session, 40)
        assert ids
        for name in SUBJECTS:
            trends.control_chart(session, name, ids)

    found = plans(engine, read)
    # each row's cell of the matrix from its job, found by the job's key
    control = [steps for sql, steps in found if "FROM drift LEFT OUTER JOIN jobs" in sql]
    assert len(control) == len(SUBJECTS), found
    for steps in control:
        assert any(
            "USING INDEX ix_drift_subject_arm_build_id (subject=? AND arm=? AND build_id=?)" in s
            for s in steps
        ), steps
        assert any("SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)" in s for s in steps), steps
    # the x axis itself walks the drift index from the newest build and stops at the window
    axis = [steps for sql, steps in found if sql.startswith("SELECT DISTINCT")]
    assert axis == [["SCAN drift USING COVERING INDEX ix_drift_build_id"]], found


def test_the_whole_trends_page_never_scans_a_results_table(
    seeded: tuple[Service, Engine],
) -> None:
    _, engine = seeded

    def read(session: Session) -> None:
        ids = trend_axis.recent_builds(session, 40)
        for name in SUBJECTS:
            trends.control_chart(session, name, ids)
            trends.deterministic_chart(session, name, ids)
            trends.cost_chart(session, name, ids)
        trends.duration_charts(session, ids)
        trend_axis.versions(session, ids)
        trends.bits_by_build(session, ids)

    found = plans(engine, read)
    tables = ("builds", "jobs", "stages", "checks", "determinism_records")
    assert len(found) >= 3 * len(SUBJECTS) + 4
    assert _full_scans(found, *tables) == [], found


def test_runners_count_leased_jobs_on_the_index_and_read_only_the_shown_ones(
    seeded: tuple[Service, Engine],
) -> None:
    _, engine = seeded
    found = plans(engine, lambda s: runners.runner_views(s, Settings(), utcnow()))
    counts = [steps for sql, steps in found if "count(*)" in sql]
    assert counts == [
        ["SEARCH jobs USING COVERING INDEX ix_jobs_state_runner_id (state=? AND runner_id>?)"]
    ], found
    per_runner = [steps for sql, steps in found if "LIMIT" in sql and "FROM jobs" in sql]
    assert per_runner, found
    for steps in per_runner:
        assert "SEARCH jobs USING INDEX ix_jobs_state_runner_id (state=? AND runner_id=?)" in steps
        assert not any("TEMP B-TREE" in s for s in steps), steps  # the index gives the order
    assert _full_scans(found, "jobs", "builds") == [], found


def test_the_runners_page_lists_the_oldest_three_leased_jobs_and_counts_the_rest(
    seeded: tuple[Service, Engine],
) -> None:
    svc, engine = seeded
    with Session(engine) as session:
        h200 = session.scalars(select(Runner).where(Runner.name == "h200-a")).one()
        leased = list(
            session.scalars(
                select(Job).where(Job.runner_id == h200.id, Job.state == "leased").order_by(Job.id)
            )
        )
    assert len(leased) == 1 + EXTRA_RUNNING  # seed_all's running build, then the extra ones
    html = loopback.get(f"{svc.url}/runners", timeout=30).text
    row = re.search(r'<tr data-runner="h200-a">(.*?)</tr>', html, re.S)
    assert row is not None, html
    shown = [int(j) for j in re.findall(r"job (\d+) \(attempt", row.group(1))]
    assert shown == [j.id for j in leased[:3]]
    assert f"and {len(leased) - 3} more" in row.group(1)
    idle = re.search(r'<tr data-runner="b200-old">(.*?)</tr>', html, re.S)
    assert idle is not None and "idle" in idle.group(1) and "more" not in idle.group(1)
