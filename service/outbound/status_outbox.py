"""The outbox of GitHub statuses: each context's states reach GitHub in order, from any replica.

``enqueue`` writes every state a context of a commit should show to ``status_outbox`` in the
transaction that changed the build (``service/results/events.py``), numbered per (commit, context):
``seq`` is the newest one's plus one, taken under a transaction-level advisory lock of the commit
on PostgreSQL (the build's row lock already orders one build's changes), so a higher ``seq`` is
always a state computed from later data. A state equal to the context's newest one of the same
build is not written again.

``Sender`` posts them after the commit, from one thread per process, in rounds: each round posts
the newest pending state of every context with one due, in the order they were written (so a
build's ``fe-ci`` goes after its jobs'), and drops the older pending ones unsent; a context given
a state after the round began waits for the next round (else a job and its build ending during a
round could post the build's state before the job's). A context is sent
by one process at a time (a session-level advisory lock of the context on PostgreSQL, which the
server frees with its connection however the process dies; on SQLite there is one process, and its
one thread), so a state is never posted after a newer one. A network error, a 5xx or a 429 leaves
the state pending for a jittered, doubling wait (a newer state of the context goes at once); a
403 or 429 of GitHub's rate limit for the wait it names (``github.rate_limit_wait``); another
answer gives it up. A sent row is kept as the context's newest state told; the older rows
of the context go when it is sent, and rows done for ``KEEP_H`` are pruned. The replica holding the
periodic lock drains the outbox each sweep, and every process once at its start, so a state
committed by a process that died before its post is still sent (at least once).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import Engine, delete, event, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from service.leader import is_postgres
from service.models import OutboxStatus, utcnow
from service.outbound.statuses import Annotation, CommitStatus

log = logging.getLogger("fe_ci.github")

KICK_KEY = "fe_ci_status_kick"
PENDING, SENT, FAILED = "pending", "sent", "failed"
# The two-key advisory locks' first key ("feST", "feSQ"): one context being sent, one commit's
# states being numbered.
_SENDING, _NUMBERING = 0x6665_5354, 0x6665_5351
BACKOFF_S = 0.5  # the first wait after a failed post; it doubles, jittered, up to MAX_WAIT_S
MAX_WAIT_S = 600.0
MAX_RATE_WAIT_S = 3600.0  # GitHub's rate limit resets within the hour; a header asking more is not
GIVE_UP_H = 24.0  # a state not delivered for this long is given up
KEEP_H = 24.0 * 7  # sent and given-up rows are kept this long (the newest told, for repeats)
BUSY_RETRY_S = 1.0  # another process held a context: look again after this
_ROUNDS = 100  # drain rounds in a row at most (each sends what was committed during the last)


def to_json(status: CommitStatus) -> str:
    return json.dumps(dataclasses.asdict(status), sort_keys=True)


def from_json(body: str) -> CommitStatus:
    doc = json.loads(body)
    doc["annotations"] = tuple(Annotation(**a) for a in doc.get("annotations") or ())
    return CommitStatus(**doc)


def _key(text_: str) -> int:
    """A signed 32-bit key for the second half of a two-key advisory lock."""
    value = zlib.crc32(text_.encode())
    return value - (1 << 32) if value >= 1 << 31 else value


def _repeats(newest: OutboxStatus | None, status: CommitStatus) -> bool:
    """The context's newest state already says this, for the same build."""
    if newest is None or newest.build_id != status.build_id:
        return False
    return from_json(newest.body).signature == status.signature


def enqueue(session: Session, statuses: list[CommitStatus]) -> int:
    """In the caller's transaction: one row per context whose state changed. Returns how many."""
    if not statuses:
        return 0
    if session.get_bind().dialect.name == "postgresql":
        for sha in sorted({s.commit for s in statuses}):
            session.execute(
                text("SELECT pg_advisory_xact_lock(:a, :b)"),
                {"a": _NUMBERING, "b": _key(sha)},
            )
    written = 0
    for status in statuses:
        newest = session.scalars(
            select(OutboxStatus)
            .where(OutboxStatus.sha == status.commit, OutboxStatus.context == status.context)
            .order_by(OutboxStatus.seq.desc())
            .limit(1)
        ).first()
        if _repeats(newest, status):
            continue
        session.add(
            OutboxStatus(
                build_id=status.build_id,
                sha=status.commit,
                context=status.context,
                seq=(newest.seq + 1) if newest is not None else 1,
                body=to_json(status),
                state=PENDING,
                attempts=0,
                next_attempt_at=utcnow(),
                last_error="",
            )
        )
        written += 1
    if written:
        session.info[KICK_KEY] = True
    return written


class Retry(Exception):
    """Worth trying again: the network, a 5xx, a 429, GitHub's rate limit. ``wait_s``: how long
    GitHub asked to wait (its rate limit's reset or ``Retry-After``), else the doubling wait."""

    def __init__(self, reason: str, wait_s: float | None = None) -> None:
        super().__init__(reason)
        self.wait_s = wait_s


Post = Callable[[CommitStatus], int]  # the HTTP status GitHub answered; raises on the network


class Sender:
    """Posts the outbox's newest state of each context, one context at a time per process."""

    def __init__(self, post: Post, sessions: sessionmaker[Session], engine: Engine) -> None:
        self.post, self.sessions, self.engine = post, sessions, engine
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="github-status")
        self._lock = threading.Lock()
        self._queued = self._closed = False
        self._timer: threading.Timer | None = None
        self._timer_at = 0.0

    def install(self) -> None:
        event.listen(self.sessions, "after_commit", self._after_commit)
        self.kick()  # what a stopped process left unsent

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(KICK_KEY, False):
            self.kick()

    def kick(self) -> None:
        with self._lock:
            if self._queued or self._closed:  # a drain is queued; or the process is stopping
                return
            self._queued = True
            self.pool.submit(self._drain_logged)

    def kick_in(self, seconds: float) -> None:
        """Drain again in ``seconds`` (one timer: the earliest wins)."""
        at = time.monotonic() + seconds
        with self._lock:
            if self._closed:
                return
            if self._timer is not None and self._timer.is_alive() and self._timer_at <= at:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(seconds, self.kick)
            self._timer.daemon = True
            self._timer_at = at
            self._timer.start()

    def close(self) -> None:
        """Stop sending; what is not sent stays in the outbox for the next drain."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _drain_logged(self) -> None:
        with self._lock:
            self._queued = False
        try:
            self.drain()
        except Exception:
            log.exception("event=commit_status_drain_failed")

    def drain(self) -> None:
        """Send the newest state of every context with one due, in the order they were written
        (a build's ``fe-ci`` after its jobs'), round after round while that sends something
        (a newer state may be committed meanwhile); then prune."""
        for _ in range(_ROUNDS):
            now = utcnow()
            with self.sessions() as session:
                # a round sends what was written before it: a context given a state during the
                # round (a job and its build ending together) waits for the next, which orders it
                horizon = session.scalar(
                    select(func.max(OutboxStatus.id)).where(OutboxStatus.state == PENDING)
                )
                due = session.execute(
                    select(OutboxStatus.sha, OutboxStatus.context)
                    .where(OutboxStatus.state == PENDING, OutboxStatus.next_attempt_at <= now)
                    .group_by(OutboxStatus.sha, OutboxStatus.context)
                    .order_by(func.max(OutboxStatus.id))
                ).all()
            progressed = False
            for sha, context in due:
                with self._sending(sha, context) as mine:
                    if mine:
                        progressed = self._send_newest(sha, context, horizon) or progressed
                    else:  # another process sends it; look again in case it stops short of ours
                        self.kick_in(BUSY_RETRY_S)
            if not progressed:
                break
        self.prune()

    @contextmanager
    def _sending(self, sha: str, context: str) -> Iterator[bool]:
        if not is_postgres(self.engine):
            yield True
            return
        keys = {"a": _SENDING, "b": _key(f"{sha}:{context}")}
        with self.engine.connect() as conn:
            got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:a, :b)"), keys).scalar())
            conn.commit()
            try:
                yield got
            finally:
                if got:
                    conn.execute(text("SELECT pg_advisory_unlock(:a, :b)"), keys)
                    conn.commit()

    def _newest_pending(self, session: Session, sha: str, context: str) -> OutboxStatus | None:
        of_context = (OutboxStatus.sha == sha, OutboxStatus.context == context)
        told = session.scalar(
            select(func.max(OutboxStatus.seq)).where(*of_context, OutboxStatus.state == SENT)
        )
        query = select(OutboxStatus).where(*of_context, OutboxStatus.state == PENDING)
        if told is not None:
            query = query.where(OutboxStatus.seq > told)
        return session.scalars(query.order_by(OutboxStatus.seq.desc()).limit(1)).first()

    def _send_newest(self, sha: str, context: str, horizon: int | None = None) -> bool:
        """Post the context's newest pending state; whether that settled it (sent or given up).
        A state written after the round began (a row past ``horizon``) is left to the next
        round, which sends it in order with the others written meanwhile (True: go again)."""
        with self.sessions() as session:
            row = self._newest_pending(session, sha, context)
            if row is None:
                return False
            if horizon is not None and row.id > horizon:
                return True
            if row.next_attempt_at > utcnow():  # waiting out a failure
                self.kick_in(max((row.next_attempt_at - utcnow()).total_seconds(), 0.05))
                return False
            row_id, seq, status = row.id, row.seq, from_json(row.body)
        try:
            code = self._post_once(status)
        except Retry as exc:
            self._later(row_id, str(exc), exc.wait_s)
            return False
        log.info(
            "event=commit_status build=%s context=%s seq=%s state=%s http=%s",
            status.build_id,
            status.context,
            seq,
            status.conclusion or status.state,
            code,
        )
        if 200 <= code < 300:
            self._sent(row_id, sha, context, seq)
        else:
            self._end(row_id, FAILED, f"HTTP {code}")
        return True

    def _post_once(self, status: CommitStatus) -> int:
        import httpx  # here, not at the top: a service that posts nothing never imports it

        try:
            code = self.post(status)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise Retry(repr(exc)) from exc
        if code >= 500 or code == 429:
            raise Retry(f"HTTP {code}")
        return code

    def _sent(self, row_id: int, sha: str, context: str, seq: int) -> None:
        with self.sessions() as session:
            row = session.get(OutboxStatus, row_id)
            if row is not None:
                row.state, row.sent_at = SENT, utcnow()
                row.attempts += 1
            session.execute(  # older states of the context: told or superseded, never sent now
                delete(OutboxStatus).where(
                    OutboxStatus.sha == sha,
                    OutboxStatus.context == context,
                    OutboxStatus.seq < seq,
                )
            )
            session.commit()

    def _end(self, row_id: int, state: str, error: str) -> None:
        with self.sessions() as session:
            row = session.get(OutboxStatus, row_id)
            if row is not None:
                row.state, row.last_error = state, error[:1000]
                row.attempts += 1
            session.commit()
        log.warning("event=commit_status_given_up id=%s error=%s", row_id, error[:200])

    def _later(self, row_id: int, error: str, asked_s: float | None = None) -> None:
        now = utcnow()
        with self.sessions() as session:
            row = session.get(OutboxStatus, row_id)
            if row is None:
                return
            row.attempts += 1
            row.last_error = error[:1000]
            if now - row.created_at > timedelta(hours=GIVE_UP_H):
                row.state = FAILED
                wait = None
            elif asked_s is not None:  # as GitHub asked, bounded, a little after (jittered)
                wait = min(max(asked_s, BACKOFF_S), MAX_RATE_WAIT_S) * random.uniform(1.0, 1.1)
                row.next_attempt_at = now + timedelta(seconds=wait)
            else:
                wait = min(BACKOFF_S * 2 ** min(row.attempts - 1, 20), MAX_WAIT_S)
                wait *= random.uniform(0.5, 1.0)
                row.next_attempt_at = now + timedelta(seconds=wait)
            attempts = row.attempts
            session.commit()
        log.warning(
            "event=commit_status_failed id=%s attempts=%s retry_in_s=%s error=%s",
            row_id,
            attempts,
            None if wait is None else round(wait, 2),
            error[:200],
        )
        if wait is not None:
            self.kick_in(wait)

    def prune(self) -> int:
        """Rows done with for ``KEEP_H``: the table holds recent commits' contexts only."""
        cutoff = utcnow() - timedelta(hours=KEEP_H)
        with self.sessions() as session:
            gone = session.execute(
                delete(OutboxStatus).where(
                    OutboxStatus.state.in_((SENT, FAILED)), OutboxStatus.created_at < cutoff
                )
            )
            session.commit()
        return int(getattr(gone, "rowcount", 0) or 0)
