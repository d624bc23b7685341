"""Outgoing notifications: a watched line turned red, or green again. The lines watched are the
branches of ``FE_CI_BRANCHES`` and, while the release watcher is on (``FE_CI_WATCH``), the line of
releases (``service/watch/``).

When a build of a watched line finishes (a listener of ``service/results/events.py``), its
colour is compared with the branch's previous coloured build. The colour is the gate's (the required
checks, ``FE_CI_REQUIRE``): ``success`` green, ``failure`` red; a ``neutral`` gate (a required
check did not run) has no colour and changes nothing. (A report stored before builds had a gate:
``pass`` green; ``fail``, ``error``, ``inconclusive`` red.) A change is
written to the ``notifications`` table in the transaction that finished the build (an outbox: a
restart loses nothing), and delivered after the commit by one worker thread: POSTed to
``FE_CI_NOTIFY_URL`` as generic JSON or a Slack-compatible message (``FE_CI_NOTIFY_FORMAT``),
signed with ``FE_CI_NOTIFY_SECRET`` (``X-FE-CI-Signature-256: sha256=<hex of the HMAC-SHA256 of the
body>``, as GitHub signs its webhooks), retried with jittered exponential back-off (tenacity) on a
network error, a 5xx or a 429. After ``FE_CI_NOTIFY_RETRIES`` attempts in a row it waits longer
(the sweeper tries again), and gives up after ``FE_CI_NOTIFY_GIVE_UP_H``; another 4xx gives up at
once."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from sqlalchemy import CursorResult, event, select, update
from sqlalchemy.orm import Session, sessionmaker
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from core.wire import RELEASES, BuildReport, BuildSource, Verdict
from service.config import Settings
from service.models import Build, FinishedReport, Notification, utcnow

log = logging.getLogger("fe_ci.notify")

KICK_KEY = "fe_ci_notify_kick"
RED, GREEN = "red", "green"
_VERDICT_COLOURS = {
    Verdict.pass_: GREEN,
    Verdict.fail: RED,
    Verdict.error: RED,
    Verdict.inconclusive: RED,
}
_GATE_COLOURS = {"success": GREEN, "failure": RED}
_LOOK_BACK = 50  # earlier builds of the branch read for its previous colour
_CLAIM_S = 600  # a delivery in flight is not taken by another worker for this long


def colour(report: BuildReport) -> str | None:
    """green, red, or None (no colour: the branch's colour stays what it was). The gate decides
    (``FE_CI_REQUIRE``); a report stored before builds had one, its verdict."""
    if report.gate is not None:
        return _GATE_COLOURS.get(report.gate.conclusion.value)
    return _VERDICT_COLOURS.get(report.verdict)


def _stored_colour(session: Session, build: Build) -> str | None:
    body = session.scalars(
        select(FinishedReport.body).where(FinishedReport.build_id == build.id)
    ).first()
    if body is not None:
        return colour(BuildReport.model_validate_json(body))
    return _VERDICT_COLOURS.get(Verdict(build.verdict))


def _branch_builds(build: Build) -> Any:
    return (
        select(Build)
        .where(Build.source == build.source, Build.branch == build.branch)
        .where(Build.bisection_id.is_(None), Build.cancelled_at.is_(None))
        .where(Build.finished_at.is_not(None), Build.id != build.id)
    )


def watched_line(settings: Settings, build: Build) -> bool:
    """A build of a watched line: a commit of a branch of ``FE_CI_BRANCHES``, or a release while
    the watcher is on (a bisection's steps are on no line)."""
    if not build.branch or build.bisection_id is not None:
        return False
    if build.source == BuildSource.commit:
        return f"refs/heads/{build.branch}" in settings.branches
    return build.source == BuildSource.release and build.branch == RELEASES and settings.watch


def build_finished(session: Session, settings: Settings, build: Build, report: BuildReport) -> None:
    """In the transaction that finished ``build``: queue a notification if its branch changed
    colour."""
    if not watched_line(settings, build) or build.cancelled_at is not None:
        return
    now = colour(report)
    if now is None:
        return
    newer = session.scalars(_branch_builds(build).where(Build.id > build.id).limit(1)).first()
    if newer is not None:  # a later build of the branch finished first: this one is old news
        return
    before, previous = None, None
    earlier = _branch_builds(build).where(Build.id < build.id).order_by(Build.id.desc())
    for candidate in session.scalars(earlier.limit(_LOOK_BACK)):
        before = _stored_colour(session, candidate)
        if before is not None:
            previous = candidate
            break
    if before == now or (before is None and now == GREEN):
        return
    body = render(settings, report, previous, now)
    session.add(Notification(build_id=build.id, event=f"branch_{now}", body=body))
    session.info[KICK_KEY] = True
    log.info("event=notification_queued build=%s branch=%s now=%s", build.id, build.branch, now)


def _sentence(report: BuildReport, previous: Build | None, now: str) -> str:
    what = "turned red" if now == RED else "is green again"
    where = f"{report.branch} {what} at build {report.id}"
    if report.commit:
        where += f" ({report.commit[:10]})"
    reason = f": {report.verdict.value}: {report.verdict_reason}".rstrip(": ")
    since = f"; build {previous.id} was {previous.verdict}" if previous is not None else ""
    return f"{where}{reason}{since}"[:1000]


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(settings: Settings, report: BuildReport, previous: Build | None, now: str) -> str:
    """The body, exactly as it is signed and sent (kept with the notification)."""
    base = settings.public_url.rstrip("/")
    url = f"{base}/builds/{report.id}"
    sentence = _sentence(report, previous, now)
    if settings.notify_format == "slack":
        text = f"<{url}|fe-ci> {_slack_escape(sentence)}"
        doc: dict[str, Any] = {
            "text": text,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
        }
    else:
        doc = {
            "event": f"branch_{now}",
            "text": sentence,
            "branch": report.branch,
            "repo": report.repo,
            "build": {
                "id": report.id,
                "url": url,
                "commit": report.commit,
                "version": report.version,
                "verdict": report.verdict.value,
                "reason": report.verdict_reason,
            },
            "previous": None
            if previous is None
            else {
                "id": previous.id,
                "url": f"{base}/builds/{previous.id}",
                "commit": previous.commit,
                "verdict": previous.verdict,
            },
        }
    return json.dumps(doc, sort_keys=True)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class _Retry(Exception):
    """Worth trying again: the network, a 5xx, a 429."""


class _Refused(Exception):
    """The receiver refused it (another 4xx): trying again would not help."""


class Notifier:
    """Delivers the outbox, one notification at a time, off the request path."""

    def __init__(self, settings: Settings, sessions: sessionmaker[Session]) -> None:
        self.settings = settings
        self.sessions = sessions
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify")

    @property
    def enabled(self) -> bool:
        return bool(self.settings.notify_url)

    def install(self) -> None:
        """Deliver after a transaction of these sessions that queued a notification, and what a
        stopped process left in flight now."""
        if not self.enabled:
            return
        event.listen(self.sessions, "after_commit", self._after_commit)
        self._release_claims()

    def build_finished(self, session: Session, build: Build, report: BuildReport) -> None:
        """The listener ``create_app`` registers on its ``events.Reactions`` (when enabled)."""
        build_finished(session, self.settings, build, report)

    def _release_claims(self) -> None:
        """At start: what a stopped process had in flight is due now. Delivery is at least once
        (a receiver drops a repeat by its ``X-FE-CI-Delivery``)."""
        now = utcnow()
        with self.sessions() as session:
            session.execute(
                update(Notification)
                .where(Notification.state == "pending", Notification.next_attempt_at > now)
                .values(next_attempt_at=now)
            )
            session.commit()

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(KICK_KEY, False):
            self.kick()

    def kick(self) -> None:
        if self.enabled:
            self.pool.submit(self._drain_logged)

    def _drain_logged(self) -> None:
        try:
            self.drain()
        except Exception:
            log.exception("event=notify_drain_failed")

    def drain(self) -> None:
        """Deliver every notification that is due."""
        now = utcnow()
        with self.sessions() as session:
            due = list(
                session.scalars(
                    select(Notification.id)
                    .where(Notification.state == "pending", Notification.next_attempt_at <= now)
                    .order_by(Notification.id)
                )
            )
        for notification_id in due:
            if self._claim(notification_id):
                self.deliver(notification_id)

    def _claim(self, notification_id: int) -> bool:
        """Take it for this worker (another process's worker skips it meanwhile)."""
        now = utcnow()
        with self.sessions() as session:
            taken: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                update(Notification)
                .where(Notification.id == notification_id, Notification.state == "pending")
                .where(Notification.next_attempt_at <= now)
                .values(next_attempt_at=now + timedelta(seconds=_CLAIM_S))
            )
            session.commit()
        return bool(taken.rowcount)

    def deliver(self, notification_id: int) -> None:
        s = self.settings
        retrying = Retrying(
            stop=stop_after_attempt(s.notify_retries),
            wait=wait_exponential_jitter(initial=s.notify_backoff_s, max=s.notify_backoff_s * 32),
            retry=retry_if_exception_type(_Retry),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._post_once(notification_id)
        except _Retry:
            self._later(notification_id)
        except _Refused:
            self._end(notification_id, "failed")
        else:
            self._end(notification_id, "sent")

    def _post_once(self, notification_id: int) -> None:
        with self.sessions() as session:
            row = session.get(Notification, notification_id)
            assert row is not None
            body, kind = row.body.encode(), row.event
            row.attempts += 1
            session.commit()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "fe-ci",
            "X-FE-CI-Event": kind,
            "X-FE-CI-Delivery": str(notification_id),
        }
        if self.settings.notify_secret:
            headers["X-FE-CI-Signature-256"] = signature(self.settings.notify_secret, body)
        assert self.settings.notify_url is not None
        import httpx  # here, not at the top: a service with no FE_CI_NOTIFY_URL never needs it

        try:
            resp = httpx.post(self.settings.notify_url, content=body, headers=headers, timeout=15)
        except httpx.HTTPError as exc:
            self._note(notification_id, repr(exc))
            raise _Retry(repr(exc)) from exc
        log.info("event=notification_post id=%s http=%s", notification_id, resp.status_code)
        if resp.is_success:
            return
        self._note(notification_id, f"HTTP {resp.status_code}: {resp.text[:200]}")
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _Retry(f"HTTP {resp.status_code}")
        raise _Refused(f"HTTP {resp.status_code}")

    def _note(self, notification_id: int, error: str) -> None:
        with self.sessions() as session:
            row = session.get(Notification, notification_id)
            assert row is not None
            row.last_error = error[:1000]
            session.commit()

    def _end(self, notification_id: int, state: str) -> None:
        with self.sessions() as session:
            row = session.get(Notification, notification_id)
            assert row is not None
            row.state = state
            row.sent_at = utcnow() if state == "sent" else None
            session.commit()
        log.info("event=notification_%s id=%s", state, notification_id)

    def _later(self, notification_id: int) -> None:
        """Out of attempts for now: the sweeper tries again later, until it is too old."""
        now = utcnow()
        with self.sessions() as session:
            row = session.get(Notification, notification_id)
            assert row is not None
            if now - row.created_at > timedelta(hours=self.settings.notify_give_up_h):
                row.state = "failed"
            else:
                wait = self.settings.notify_backoff_s * 2 ** min(row.attempts, 16)
                row.next_attempt_at = now + timedelta(seconds=min(wait, 3600.0))
            session.commit()
        log.warning("event=notification_deferred id=%s", notification_id)
