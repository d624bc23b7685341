"""Commit statuses, or check runs where a GitHub App is configured, for commit builds.

Per job and for the build (``service/outbound/statuses.py`` says what each one says). Every state
is written to the outbox while the build's state changes, in the same transaction, and posted
after the commit (``service/outbound/status_outbox.py``: in order per context across replicas,
only the newest, retried with back-off, nothing lost to a restart). A plain token
(``FE_CI_GITHUB_TOKEN``) posts commit statuses; an App (``FE_CI_GITHUB_APP_ID``,
``..._PRIVATE_KEY``, ``..._INSTALLATION_ID``) posts check runs: created when the job is first
seen, completed with a conclusion, the build page's summary and the failing checks as annotations.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core.wire import BuildReport
from service.config import Settings
from service.models import Build
from service.outbound import status_outbox
from service.outbound.github_app import HEADERS, AppAuth
from service.outbound.statuses import CommitStatus, build_statuses

log = logging.getLogger("fe_ci.github")

_GITHUB_REPO = re.compile(r"github\.com[:/](?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?/?$")
_REMEMBERED = 50_000  # check-run ids remembered (an older one is found again by its external_id)
# GitHub takes at most 50 annotations per request; they must name a file of the repository.
MAX_ANNOTATIONS = 50
ANNOTATION_PATH = "python/cudnn/__init__.py"


def rate_limit_wait(code: int, headers: Mapping[str, str], now: float) -> float | None:
    """Seconds GitHub asks to wait when ``code`` is its answer to a token over a rate limit: a 403
    or 429 with ``Retry-After`` (its secondary limits) or with ``x-ratelimit-remaining: 0`` (until
    ``x-ratelimit-reset``, epoch seconds; a minute where that is missing). None for any other
    answer, a 403 of missing permissions included (that one is given up)."""
    if code not in (403, 429):
        return None
    retry_after = (headers.get("retry-after") or "").strip()
    if retry_after.isdigit():
        return float(retry_after)
    if (headers.get("x-ratelimit-remaining") or "").strip() == "0":
        reset = (headers.get("x-ratelimit-reset") or "").strip()
        return max(float(reset) - now, 1.0) if reset.isdigit() else 60.0
    return None


def _limited(resp: Any) -> int:
    """``resp``'s status, or ``Retry`` with GitHub's wait where it is over a rate limit."""
    wait = rate_limit_wait(resp.status_code, resp.headers, time.time())
    if wait is not None:
        raise status_outbox.Retry(f"HTTP {resp.status_code}: rate limited", wait_s=wait)
    return int(resp.status_code)


def owner_repo(url: str) -> tuple[str, str] | None:
    m = _GITHUB_REPO.search(url)
    return (m["owner"], m["name"]) if m else None


class StatusReporter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.check_runs: dict[tuple[int, str], int] = {}
        self.sender: status_outbox.Sender | None = None
        s = settings
        self.app = (
            AppAuth(
                s.github_api_url,
                s.github_app_id,
                s.github_app_private_key,
                s.github_app_installation_id,
            )
            if s.github_app_id and s.github_app_private_key and s.github_app_installation_id
            else None
        )

    @property
    def enabled(self) -> bool:
        configured = self.app is not None or bool(self.settings.github_token)
        return configured and owner_repo(self.settings.repo_url) is not None

    def install(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        """The outbox's sender: what a transaction of these sessions wrote is sent after it
        commits."""
        if self.enabled:
            self.sender = status_outbox.Sender(self.post, sessions, engine)
            self.sender.install()

    def kick(self) -> None:
        """Send what is due in the outbox (the periodic round: retries, other processes' rows)."""
        if self.sender is not None:
            self.sender.kick()

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()

    def _repo_api(self) -> str | None:
        where = owner_repo(self.settings.repo_url)
        if where is None:
            return None
        return f"{self.settings.github_api_url.rstrip('/')}/repos/{where[0]}/{where[1]}"

    def post(self, status: CommitStatus) -> int:
        """One post (or check run's create or update); GitHub's HTTP status. Raises on a network
        error; 0 when nothing is configured to post with."""
        repo = self._repo_api()
        if repo is None:
            return 0
        if self.app is not None:
            return self._check_run(repo, status)
        if self.settings.github_token:
            return self._status(repo, status, self.settings.github_token)
        return 0

    def send(self, status: CommitStatus) -> None:
        """One post, logged; errors are logged, not raised."""
        import httpx  # here, not at the top: a service that posts nothing never imports it

        try:
            code = self.post(status)
            log.info(
                "event=commit_status build=%s context=%s state=%s http=%s",
                status.build_id,
                status.context,
                status.conclusion or status.phase if self.app else status.state,
                code,
            )
        except (httpx.HTTPError, ValueError, KeyError, status_outbox.Retry) as exc:
            log.warning(
                "event=commit_status_failed build=%s context=%s error=%r",
                status.build_id,
                status.context,
                exc,
            )

    def _status(self, repo: str, status: CommitStatus, token: str) -> int:
        import httpx

        body = {
            "state": status.state,
            "target_url": status.target_url,
            "description": status.description,
            "context": status.context,
        }
        headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        resp = httpx.post(
            f"{repo}/statuses/{status.commit}", json=body, headers=headers, timeout=15
        )
        return _limited(resp)

    def _check_run(self, repo: str, status: CommitStatus) -> int:
        import httpx

        assert self.app is not None
        headers = {**HEADERS, "Authorization": f"Bearer {self.app.token()}"}
        body: dict[str, Any] = {"status": status.phase, "details_url": status.target_url}
        output: dict[str, Any] = {"title": status.description, "summary": status.summary}
        if status.phase == "completed":
            body["conclusion"] = status.conclusion
            output["annotations"] = [
                {
                    "path": ANNOTATION_PATH,
                    "start_line": 1,
                    "end_line": 1,
                    "annotation_level": a.level,
                    "title": a.title[:255],
                    "message": a.message[:64000],
                }
                for a in status.annotations[:MAX_ANNOTATIONS]
            ]
        body["output"] = output
        key = (status.build_id, status.context)
        run_id = self.check_runs.get(key) or self._find_run(repo, status, headers)
        if run_id is not None:
            resp = httpx.patch(
                f"{repo}/check-runs/{run_id}", json=body, headers=headers, timeout=15
            )
            return _limited(resp)
        create = {
            "name": status.context,
            "head_sha": status.commit,
            "external_id": f"{status.build_id}:{status.context}",
            **body,
        }
        resp = httpx.post(f"{repo}/check-runs", json=create, headers=headers, timeout=15)
        if resp.status_code == 201:
            self._remember(key, int(resp.json()["id"]))
        return _limited(resp)

    def _remember(self, key: tuple[int, str], run_id: int) -> None:
        self.check_runs[key] = run_id
        while len(self.check_runs) > _REMEMBERED:
            self.check_runs.pop(next(iter(self.check_runs)))

    def _find_run(self, repo: str, status: CommitStatus, headers: dict[str, str]) -> int | None:
        """The run this service created for the context before it restarted, if any: completing
        it beats leaving it ``in_progress`` for ever beside a new one."""
        import httpx

        resp = httpx.get(
            f"{repo}/commits/{status.commit}/check-runs",
            params={"check_name": status.context, "filter": "all"},
            headers=headers,
            timeout=15,
        )
        if resp.status_code != 200:
            _limited(resp)  # over the rate limit: retried later, never a second run beside it
            return None
        ours = f"{status.build_id}:{status.context}"
        for run in resp.json().get("check_runs") or []:
            if run.get("external_id") == ours and isinstance(run.get("id"), int):
                self._remember((status.build_id, status.context), run["id"])
                return int(run["id"])
        return None


def may_post(session: Session, build_id: int) -> bool:
    """Every status passes here: a bisection's step builds tell GitHub nothing (their commits
    are older than the branch's head, and their verdicts cover only the deciding stage)."""
    build = session.get(Build, build_id)
    return build is not None and build.bisection_id is None


def wants_statuses(session: Session, build: Build, reporter: StatusReporter | None) -> bool:
    """Whether a change of this build's jobs is told to GitHub at all."""
    return (
        reporter is not None
        and reporter.enabled
        and build.source == "commit"
        and bool(build.commit)
        and may_post(session, build.id)
    )


def queue_statuses(session: Session, report: BuildReport, reporter: StatusReporter | None) -> None:
    """Write every context of a commit build that changed to the outbox, in this transaction;
    they are sent after the commit."""
    if not (reporter is not None and reporter.enabled and report.commit):
        return
    if report.id is None or not may_post(session, report.id):
        log.info("event=commit_status_withheld build=%s reason=bisection", report.id)
        return
    status_outbox.enqueue(session, build_statuses(report, reporter.settings.public_url))
