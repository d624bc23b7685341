"""What the outbox of GitHub statuses costs: writing a build's states in its transaction, and
sending them, on SQLite and (where its binaries are) PostgreSQL.

    .venv/bin/python bench/status_outbox.py [--changes 300] [--json OUT]

For each database: a fresh one made at the schema's head, one commit build, then ``--changes``
transactions that each write the build's five contexts (four jobs' and ``fe-ci``), every context
changed (``status_outbox.enqueue``, as ``service/results/events.py`` calls it); the time per
transaction is taken. Then the sender drains them with a post that answers 201 at once (no HTTP:
the outbox's own work), first one drain after all the changes (only each context's newest is
sent), then one drain after each change (every state sent). The table's rows are counted after
each. Prints a JSON summary (``--json`` also writes it); removes everything it wrote.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import func, select

from service import db
from service.models import Build, OutboxStatus
from service.outbound import status_outbox
from service.outbound.statuses import CommitStatus
from testkit.postgres import find_bindir, running

CONTEXTS = ("fe-ci/build", "fe-ci/probe", "fe-ci/sm_90", "fe-ci/sm_100", "fe-ci")


def _statuses(build_id: int, n: int) -> list[CommitStatus]:
    return [
        CommitStatus(
            build_id=build_id,
            commit="a" * 40,
            context=context,
            state="pending",
            description=f"change {n}",
            target_url=f"https://ci.example.org/builds/{build_id}",
            phase="in_progress",
        )
        for context in CONTEXTS
    ]


def _measure(url: str, changes: int) -> dict[str, Any]:
    db.migrate(url)
    engine = db.make_engine(url)
    sessions = db.session_factory(engine)
    posted: list[CommitStatus] = []

    def post(status: CommitStatus) -> int:
        posted.append(status)
        return 201

    sender = status_outbox.Sender(post, sessions, engine)
    with sessions() as session:
        build = Build(source="commit", commit="a" * 40)
        session.add(build)
        session.commit()
        build_id = build.id

    def write(n: int) -> float:
        start = time.perf_counter()
        with sessions() as session:
            status_outbox.enqueue(session, _statuses(build_id, n))
            session.commit()
        return time.perf_counter() - start

    def rows() -> int:
        with sessions() as session:
            return int(session.scalar(select(func.count()).select_from(OutboxStatus)) or 0)

    writes = [write(n) for n in range(changes)]
    pending = rows()
    start = time.perf_counter()
    sender.drain()
    one_drain = time.perf_counter() - start
    newest_only = len(posted)
    after_one = rows()
    each: list[float] = []
    for n in range(changes, 2 * changes):
        write(n)
        start = time.perf_counter()
        sender.drain()
        each.append(time.perf_counter() - start)
    sender.close()
    engine.dispose()
    return {
        "write_ms_median": round(statistics.median(writes) * 1000, 2),
        "write_ms_p95": round(sorted(writes)[int(len(writes) * 0.95)] * 1000, 2),
        "rows_before_drain": pending,
        "one_drain_ms": round(one_drain * 1000, 1),
        "posted_by_one_drain": newest_only,
        "rows_after_one_drain": after_one,
        "drain_per_change_ms_median": round(statistics.median(each) * 1000, 2),
        "posted_in_all": len(posted),
        "rows_at_end": rows(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out: dict[str, Any] = {"changes": args.changes, "contexts": len(CONTEXTS)}
    work = Path(tempfile.mkdtemp(prefix="fe-ci-outbox-"))
    try:
        out["sqlite"] = _measure(f"sqlite:///{work / 'fe-ci.sqlite3'}", args.changes)
        bindir = find_bindir()
        if bindir is not None:
            with running(bindir) as server:
                out["postgresql"] = _measure(server.create_database(), args.changes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
