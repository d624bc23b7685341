"""GitHub commit statuses for commit builds, when ``FE_CI_GITHUB_TOKEN`` is set.

Statuses are queued on the session while the verdict changes and sent only after the commit
that stored it, from a small thread pool, so a slow GitHub never holds a request or a lock.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from runner.wire import Verdict
from service.config import Settings
from service.models import Build

log = logging.getLogger("fe_ci.github")

STATES = {
    Verdict.pending: "pending",
    Verdict.pass_: "success",
    Verdict.fail: "failure",
    Verdict.error: "error",
    Verdict.inconclusive: "error",
    Verdict.incomplete: "success",
    Verdict.cancelled: "error",
}
_GITHUB_REPO = re.compile(r"github\.com[:/](?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?/?$")
PENDING_KEY = "fe_ci_github_pending"


@dataclass(frozen=True)
class Status:
    build_id: int
    commit: str
    verdict: Verdict
    reason: str


def description(verdict: Verdict, reason: str) -> str:
    if verdict == Verdict.incomplete:
        text = f"incomplete: {reason}"
    elif verdict == Verdict.pending:
        text = "validating"
    else:
        text = f"{verdict.value}: {reason}"
    return text[:140]  # GitHub's limit


def owner_repo(url: str) -> tuple[str, str] | None:
    m = _GITHUB_REPO.search(url)
    return (m["owner"], m["name"]) if m else None


class StatusReporter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="github-status")

    @property
    def enabled(self) -> bool:
        return bool(self.settings.github_token) and owner_repo(self.settings.repo_url) is not None

    def install(self, sessions: sessionmaker[Session]) -> None:
        sessions.configure(info={"github": self})
        event.listen(sessions, "after_commit", self._after_commit)

    def _after_commit(self, session: Session) -> None:
        pending: dict[int, Status] = session.info.pop(PENDING_KEY, {})
        for status in pending.values():
            self.pool.submit(self.send, status)

    def send(self, status: Status) -> None:
        where = owner_repo(self.settings.repo_url)
        if where is None or not self.settings.github_token:
            return
        owner, name = where
        api = self.settings.github_api_url.rstrip("/")
        url = f"{api}/repos/{owner}/{name}/statuses/{status.commit}"
        body = {
            "state": STATES[status.verdict],
            "target_url": f"{self.settings.public_url.rstrip('/')}/builds/{status.build_id}",
            "description": description(status.verdict, status.reason),
            "context": "fe-ci/determinism",
        }
        headers = {
            "Authorization": f"Bearer {self.settings.github_token}",
            "Accept": "application/vnd.github+json",
        }
        try:
            resp = httpx.post(url, json=body, headers=headers, timeout=15)
            log.info(
                "event=commit_status build=%s state=%s http=%s",
                status.build_id,
                body["state"],
                resp.status_code,
            )
        except httpx.HTTPError as exc:
            log.warning("event=commit_status_failed build=%s error=%r", status.build_id, exc)


def may_post(session: Session, build_id: int) -> bool:
    """Every status passes here: a bisection's step builds tell GitHub nothing (their commits
    are older than the branch's head, and their verdicts cover only the deciding stage)."""
    build = session.get(Build, build_id)
    return build is not None and build.bisection_id is None


def queue_status(session: Session, status: Status) -> None:
    reporter = session.info.get("github")
    if not (isinstance(reporter, StatusReporter) and reporter.enabled):
        return
    if not may_post(session, status.build_id):
        log.info("event=commit_status_withheld build=%s reason=bisection", status.build_id)
        return
    session.info.setdefault(PENDING_KEY, {})[status.build_id] = status
