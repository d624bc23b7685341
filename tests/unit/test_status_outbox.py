"""The outbox of GitHub statuses on a real SQLite file, with the post in place of GitHub (which
cannot be reached here; ``tests/functional/test_status_outbox.py`` posts to a local recorder)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service import db
from service.models import Build, OutboxStatus, utcnow
from service.outbound import status_outbox
from service.outbound.statuses import Annotation, CommitStatus


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'fe-ci.sqlite3'}"
    db.migrate(url)
    engine = db.make_engine(url)
    yield db.session_factory(engine)
    engine.dispose()


def _build(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        build = Build(source="commit", commit="c" * 40)
        session.add(build)
        session.commit()
        return build.id


def _status(build_id: int, description: str, context: str = "fe-ci/sm_90") -> CommitStatus:
    return CommitStatus(
        build_id=build_id,
        commit="c" * 40,
        context=context,
        state="pending",
        description=description,
        target_url=f"https://ci.example.org/builds/{build_id}",
        phase="in_progress",
        annotations=(Annotation(title="t", level="warning", message="m"),),
    )


def _write(sessions: sessionmaker[Session], *statuses: CommitStatus) -> int:
    with sessions() as session:
        written = status_outbox.enqueue(session, list(statuses))
        session.commit()
        return written


def _rows(sessions: sessionmaker[Session]) -> list[tuple[int, int, str, str]]:
    with sessions() as session:
        return [
            (r.build_id, r.seq, r.state, status_outbox.from_json(r.body).description)
            for r in session.scalars(select(OutboxStatus).order_by(OutboxStatus.seq))
        ]


def test_a_state_is_written_once_per_change_and_numbered_in_order(
    sessions: sessionmaker[Session],
) -> None:
    first, rerun = _build(sessions), _build(sessions)
    assert _write(sessions, _status(first, "queued")) == 1
    assert _write(sessions, _status(first, "queued")) == 0  # unchanged: not written again
    assert _write(sessions, _status(first, "running")) == 1
    assert _write(sessions, _status(rerun, "running")) == 1  # another build of the commit
    assert _rows(sessions) == [
        (first, 1, "pending", "queued"),
        (first, 2, "pending", "running"),
        (rerun, 3, "pending", "running"),
    ]
    status = _status(first, "queued")
    with sessions() as session:
        body = session.scalars(select(OutboxStatus.body).limit(1)).one()
    assert status_outbox.from_json(body) == status  # what is sent is what was computed


def test_the_sender_posts_the_newest_and_a_refusal_gives_it_up(
    sessions: sessionmaker[Session],
) -> None:
    build = _build(sessions)
    posted: list[CommitStatus] = []
    answers: list[int] = []
    sender = status_outbox.Sender(
        lambda s: posted.append(s) or answers.pop(0), sessions, sessions.kw["bind"]
    )
    _write(sessions, _status(build, "queued"), _status(build, "validating", context="fe-ci"))
    _write(sessions, _status(build, "running"))
    answers = [201, 201]
    sender.drain()
    # the older sm_90 state was never sent; the contexts went in the order they were written
    assert [(s.context, s.description) for s in posted] == [
        ("fe-ci", "validating"),
        ("fe-ci/sm_90", "running"),
    ]
    assert [r[1:] for r in _rows(sessions)] == [(1, "sent", "validating"), (2, "sent", "running")]
    _write(sessions, _status(build, "pass"))
    answers = [422]  # GitHub refused it: retrying would not help
    sender.drain()
    sender.drain()
    assert [s.description for s in posted][2:] == ["pass"]
    assert [r[2:] for r in _rows(sessions) if r[3] != "validating"] == [
        ("sent", "running"),
        ("failed", "pass"),
    ]
    sender.close()


def test_rows_done_with_long_ago_are_pruned(sessions: sessionmaker[Session]) -> None:
    build = _build(sessions)
    sender = status_outbox.Sender(lambda s: 201, sessions, sessions.kw["bind"])
    _write(sessions, _status(build, "old"), _status(build, "pending", context="fe-ci"))
    with sessions() as session:
        old = session.scalars(select(OutboxStatus).order_by(OutboxStatus.id)).first()
        assert old is not None
        old.state = "sent"
        old.created_at = utcnow() - timedelta(hours=status_outbox.KEEP_H + 1)
        session.commit()
    assert sender.prune() == 1
    assert [r[3] for r in _rows(sessions)] == ["pending"]  # still to send: kept
    sender.close()


def test_a_status_round_trips_through_its_json() -> None:
    status = dataclasses.replace(_status(1, "x"), conclusion="success", summary="s")
    assert status_outbox.from_json(status_outbox.to_json(status)) == status


def test_states_written_during_a_round_go_in_the_next_in_their_order(
    sessions: sessionmaker[Session],
) -> None:
    """A GPU job and its build end while a round posts: the job's context and the build's
    ``fe-ci`` each get a state, in that order. The build's must not reach GitHub before the
    job's: the round sends what was written before it, the next round the rest, in order."""
    build = _build(sessions)
    _write(sessions, _status(build, "running"), _status(build, "validating", context="fe-ci"))
    posted: list[tuple[str, str]] = []

    def post(status: CommitStatus) -> int:
        if not posted:  # while the round's first post is out, the job and then the build end
            _write(sessions, _status(build, "pass"))
            _write(sessions, _status(build, "incomplete", context="fe-ci"))
        posted.append((status.context, status.description))
        return 201

    sender = status_outbox.Sender(post, sessions, sessions.kw["bind"])
    sender.drain()
    sender.close()
    assert posted == [
        ("fe-ci/sm_90", "running"),
        ("fe-ci/sm_90", "pass"),
        ("fe-ci", "incomplete"),
    ]
