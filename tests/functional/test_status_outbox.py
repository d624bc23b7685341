"""The outbox of GitHub statuses (``service/outbound/status_outbox.py``): in order per context
across two replicas on one PostgreSQL, retried after a 5xx, not lost to a crash, and only a
context's newest state sent once GitHub is back, on SQLite.

GitHub cannot be reached here, so ``tests/github_recorder.py`` stands in for it (a real HTTP server
on 127.0.0.1 that can answer 500 or hold a post). The services are real ``fe-ci serve`` processes;
the runners are driven through the real runner protocol (``tests/commit_build.py``).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from testkit.service import Service
from testkit.waiting import eventually
from tests.commit_build import finish, run_cpu_job, run_gpu_job, start_commit_build
from tests.github_recorder import Call, GitHubRecorder
from tests.helpers import AFTER, push, register, send
from tests.postgres import postgres_server, postgres_url  # noqa: F401 - fixtures

StartService = Callable[..., Service]
WAITING_FOR_REFUSALS = "waiting for the refusal decisions"


@pytest.fixture
def github() -> Iterator[GitHubRecorder]:
    recorder = GitHubRecorder()
    yield recorder
    recorder.close()


def _env(github: GitHubRecorder, **extra: str) -> dict[str, str]:
    return {
        "FE_CI_GITHUB_TOKEN": "gh-token-for-tests",
        "FE_CI_GITHUB_API_URL": github.url,
        **extra,
    }


def _statuses(calls: list[Call]) -> dict[str, list[Call]]:
    out: dict[str, list[Call]] = {}
    for c in calls:
        if "/statuses/" in c.path:
            out.setdefault(c.body["context"], []).append(c)
    return out


def _rows(db: Callable[[str], list[Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """The outbox's rows by context: (seq, state, attempts, description), in order."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for context, seq, state, attempts, body in db(
        "SELECT context, seq, state, attempts, body FROM status_outbox ORDER BY context, seq"
    ):
        out.setdefault(context, []).append((seq, state, attempts, json.loads(body)["description"]))
    return out


def _sqlite(svc: Service) -> Callable[[str], list[Any]]:
    def run(sql: str) -> list[Any]:
        with sqlite3.connect(svc.data_dir / "fe-ci.sqlite3") as conn:
            return conn.execute(sql).fetchall()

    return run


def _settled(db: Callable[[str], list[Any]]) -> bool:
    return db("SELECT count(*) FROM status_outbox WHERE state = 'pending'")[0][0] == 0


def _in_order(posted: list[str]) -> bool:
    """A context's states as GitHub applied them: once a job's state is final, nothing pending
    follows it."""
    done = [i for i, state in enumerate(posted) if state != "pending"]
    return not done or all(state != "pending" for state in posted[done[0] :])


def test_two_replicas_post_one_contexts_states_in_order(
    make_service: StartService,
    postgres_url: str,  # noqa: F811 - the fixture's name
    github: GitHubRecorder,
    tmp_path: Path,
) -> None:
    """The sm_90 job finishes on replica A, whose post of that context's state ("waiting for the
    refusal decisions") GitHub holds; the CPU job finishes on replica B at that moment, which
    makes the same context ``success``. GitHub must end on ``success``, never the stale
    ``pending`` after it (each replica posting from its own thread did exactly that)."""
    env = _env(github, FE_CI_DATABASE_URL=postgres_url, FE_CI_GPU_ARCHS="sm_90")
    a, b = make_service(**env), make_service(**env)

    def stale(call: Call) -> bool:
        return WAITING_FOR_REFUSALS in call.body.get("description", "")

    github.hold = stale
    start_commit_build(a, tmp_path)
    gpu = register(a, "gpu-1", arch="sm_90")
    finish(gpu, run_gpu_job(gpu, "pass"))  # through A
    github.wait_until(lambda _: any(stale(c) for c in github.arrived))
    cpu = register(b, "cpu-1")
    finish(cpu, run_cpu_job(cpu))  # through B, while A's post is in flight

    def final(calls: list[Call]) -> bool:
        contexts = _statuses(calls)
        ends = [contexts.get(k, [None])[-1] for k in ("fe-ci/sm_90", "fe-ci/probe", "fe-ci")]
        return all(c is not None and c.body["state"] == "success" for c in ends)

    contexts = _statuses(github.wait_until(final, timeout=60))
    for context, calls in contexts.items():
        assert _in_order([c.body["state"] for c in calls]), (context, calls)
    sm90 = [c.body["description"] for c in contexts["fe-ci/sm_90"]]
    assert any(WAITING_FOR_REFUSALS in d for d in sm90), sm90  # the held post was made
    assert sm90[-1].startswith("pass: ")
    engine = create_engine(postgres_url)
    try:

        def query(sql: str) -> list[Any]:
            with engine.connect() as conn:
                return list(conn.execute(text(sql)).all())

        eventually(lambda: _settled(query), message="the outbox sent")
        rows = _rows(query)
    finally:
        engine.dispose()
    # the newest row of each context is the one GitHub shows; older ones are gone
    for context, calls in _statuses(github.calls).items():
        ((_, state, _, shown),) = rows[context]
        assert (state, shown) == ("sent", calls[-1].body["description"]), (context, calls)


def test_a_status_answered_500_is_retried_and_delivered_once(
    make_service: StartService, github: GitHubRecorder
) -> None:
    github.status_codes = [500]
    svc = make_service(**_env(github))
    send(svc, push())
    first = github.wait_until(lambda calls: bool(_statuses(calls)))
    failed = next(c for c in first if "/statuses/" in c.path)
    assert failed.code == 500 and failed.path.endswith(AFTER)
    context = failed.body["context"]

    def delivered(calls: list[Call]) -> bool:
        return any(c.code == 201 for c in _statuses(calls).get(context, []))

    github.wait_until(delivered)
    db = _sqlite(svc)
    eventually(lambda: _settled(db), message="the outbox sent")
    posts = _statuses(github.calls)[context]
    assert [c.code for c in posts] == [500, 201]
    assert posts[1].body == failed.body  # the same state, once more
    ((_, state, attempts, _),) = _rows(db)[context]
    assert (state, attempts) == ("sent", 2)


def test_a_status_over_githubs_rate_limit_waits_for_its_reset_then_is_delivered(
    make_service: StartService, github: GitHubRecorder
) -> None:
    """GitHub answers a token over its rate limit 403 with ``x-ratelimit-remaining: 0`` and the
    reset time: the state waits until then (not given up as a 403 of permissions is), then goes."""
    reset = int(time.time()) + 3
    limited = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
    github.status_codes = [(403, limited)]
    svc = make_service(**_env(github))
    send(svc, push())
    first = github.wait_until(lambda calls: bool(_statuses(calls)))
    refused = next(c for c in first if "/statuses/" in c.path)
    assert refused.code == 403
    context = refused.body["context"]
    db = _sqlite(svc)

    def waiting() -> list[Any]:
        return db(f"SELECT state, last_error FROM status_outbox WHERE context = '{context}'")

    eventually(waiting, until=lambda rows: rows and rows[0][1], message="the refusal noted")
    assert waiting()[0] == ("pending", "HTTP 403: rate limited")
    github.wait_until(
        lambda calls: any(c.code == 201 for c in _statuses(calls).get(context, [])), timeout=30
    )
    assert time.time() >= reset - 0.5  # not before GitHub said
    posts = _statuses(github.calls)[context]
    assert [c.code for c in posts] == [403, 201] and posts[1].body == refused.body


def test_a_403_that_is_no_rate_limit_is_given_up(
    make_service: StartService, github: GitHubRecorder
) -> None:
    """A token without the permission to post statuses: GitHub answers 403 with no rate-limit
    header, and waiting would not change it."""
    github.status_codes = [403]
    svc = make_service(**_env(github))
    send(svc, push())
    first = github.wait_until(lambda calls: bool(_statuses(calls)))
    context = next(c for c in first if "/statuses/" in c.path).body["context"]
    db = _sqlite(svc)
    rows = eventually(
        lambda: db(f"SELECT state, last_error FROM status_outbox WHERE context = '{context}'"),
        until=lambda rows: rows and rows[0][0] != "pending",
        message="the state given up",
    )
    assert rows[0] == ("failed", "HTTP 403")


def test_a_state_committed_before_a_crash_is_posted_after_the_restart(
    make_service: StartService, github: GitHubRecorder
) -> None:
    """The service is killed (SIGKILL) while its first post is in flight: nothing of the other
    contexts was posted. Started again, it posts every context's state."""
    github.hold, github.hold_s = (lambda call: True), 120.0
    svc = make_service(**_env(github))
    send(svc, push())
    github.wait_until(lambda _: bool(github.arrived))
    db = _sqlite(svc)
    contexts = {row[0] for row in db("SELECT context FROM status_outbox")}
    assert len(contexts) >= 3, contexts  # fe-ci/build, fe-ci/probe, fe-ci
    svc.stop(signal.SIGKILL)
    assert len(github.arrived) == 1  # one context's post in flight, the rest not yet sent
    github.release()
    before = len(github.arrived)
    svc.start()
    eventually(lambda: _settled(db), message="the outbox sent after the restart")
    after = _statuses(github.arrived[before:])
    assert set(after) == contexts
    rows = _rows(db)
    for context, calls in after.items():
        assert calls[-1].body["description"] == rows[context][-1][3]


def test_on_sqlite_only_each_contexts_newest_state_is_sent_once_github_is_back(
    make_service: StartService, github: GitHubRecorder, tmp_path: Path
) -> None:
    """GitHub answers 500 while the build job is queued, runs and finishes: each of those
    states is tried and fails. Once GitHub is back, each context gets its newest state, once,
    and the outbox keeps one row per context."""
    github.down = True
    svc = make_service(**_env(github))
    start_commit_build(svc, tmp_path)
    db = _sqlite(svc)
    build_rows = _rows(db)["fe-ci/build"]
    assert len(build_rows) >= 2 and build_rows[-1][3].startswith("pass: "), build_rows
    github.wait_until(
        lambda calls: any(c.body.get("description", "").startswith("pass: ") for c in calls)
    )
    github.down = False
    eventually(lambda: _settled(db), timeout=60, message="the outbox sent")
    rows = _rows(db)
    posted = _statuses(github.calls)
    assert set(posted) == set(rows)
    for context, calls in posted.items():
        ok = [c.body["description"] for c in calls if c.code == 201]
        assert ok == [rows[context][-1][3]], (context, ok)
        assert calls[-1].code == 201  # nothing older after it
        assert [r[1] for r in rows[context]] == ["sent"], rows[context]
    assert [c.body["state"] for c in posted["fe-ci/build"] if c.code == 201] == ["success"]
