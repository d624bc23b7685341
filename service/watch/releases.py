"""The release watcher (``FE_CI_WATCH``): every new frontend release on the package index becomes
one build, ``release`` on the line of releases, the way a push to develop becomes one on develop.

Each poll reads the project's page (``service/watch/index.py``), takes every release not yet in
``watched_releases`` (the unique (package, version) lets one service process alone take it), then
submits each taken release: the wheel that fits the runners is downloaded under a size bound, its
sha256 checked against the index's, checked as an uploaded wheel is, stored by its sha256, and
its build and jobs made in the transaction that marks the release submitted. A crash between
taking and submitting leaves the release ``pending``: the next poll submits it. At the first poll
of an empty store the newest ``FE_CI_WATCH_BACKFILL`` releases are validated and the older ones
recorded as seen.

The index away (unreachable, an error status, no simple API page) makes the next poll wait
twice as long, up to ``FE_CI_WATCH_MAX_BACKOFF_S``; the first good poll goes back to
``FE_CI_WATCH_INTERVAL_S``. On several replicas only the one holding the periodic lock polls
(``service/leader.py``).

The backends' releases (``nvidia-cudnn-cu12``, ``-cu13``) are the hook for a matrix that follows
the newest backend: ``Watcher(package=...)`` reads any package's releases, and
``watched_releases`` keys them by package; what a new backend release should start is the
matrix's to define (this module submits frontend wheels only, checked as the upload checks them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx
from packaging.utils import parse_wheel_filename
from packaging.version import Version
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from core.wire import RELEASES, BuildSource
from service.config import Settings
from service.errors import ApiError
from service.jobs import queue, quotas
from service.leader import Leader
from service.models import Build, WatchedRelease
from service.uploads import uploads
from service.uploads.wheelcheck import DISTRIBUTION, MAX_UNPACKED_BYTES, check_wheel
from service.watch import index
from service.watch.index import BadRelease, IndexAway, IndexFile, Origins

log = logging.getLogger("fe_ci.watch")

PENDING, SUBMITTED, SEEN, REFUSED = "pending", "submitted", "seen", "refused"
SUBMITTER = "watcher"  # the build's ``submitted_by``
MAX_ATTEMPTS = 5  # downloads of one release that failed with the index away, before refusing it


def origins_of(settings: Settings) -> Origins:
    if settings.watch_index:
        url, hosts = settings.watch_index, frozenset[str]()
    else:
        url, hosts = index.default_index()
    return Origins(url, hosts | {h.lower() for h in settings.watch_file_hosts})


class Watcher:
    """Polls one package's releases; ``poll()`` returns the seconds to wait before the next."""

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        announce: Callable[[Session, Build], None],
        on_queued: Callable[[], None],
        package: str = DISTRIBUTION,
    ) -> None:
        self.settings, self.sessions, self.on_queued = settings, sessions, on_queued
        self.announce = announce  # the queue's announcement, with what a new build sets off
        self.package = package
        self.origins = origins_of(settings)
        self.failures = 0
        # redirects are followed by index._get, each checked against the origins
        self.client = httpx.Client(timeout=index.TIMEOUT_S, follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def poll(self) -> float:
        try:
            found = index.releases(
                index.read_project(self.client, self.origins, self.package),
                self.package,
                self.settings.watch_python,
            )
            self._take_new(found)
            self._submit_pending(found)
        except IndexAway as exc:
            self.failures += 1
            wait = self.backoff()
            log.warning(
                "event=watch_index_away index=%s failures=%s retry_in_s=%s reason=%r",
                self.origins.index,
                self.failures,
                wait,
                str(exc),
            )
            return wait
        self.failures = 0
        return self.settings.watch_interval_s

    def backoff(self) -> float:
        """The wait after ``failures`` polls in a row found the index away: doubling, capped."""
        base = self.settings.watch_interval_s
        return float(min(base * 2 ** min(self.failures, 32), self.settings.watch_max_backoff_s))

    def _take_new(self, found: dict[Version, IndexFile]) -> None:
        """Record every release not seen before, all in one transaction (a crash part-way
        through the first poll must not turn the older releases into new ones)."""
        with self.sessions() as session:
            known = set(
                session.scalars(
                    select(WatchedRelease.version).where(WatchedRelease.package == self.package)
                )
            )
            versions = [v for v in found if str(v) not in known]
            if not versions:
                return
            validated = set(versions)
            if not known:  # the first poll: only the newest few are validated
                backfill = self.settings.watch_backfill
                validated = set(versions[-backfill:]) if backfill else set()
            for version in versions:  # oldest first: the line's builds follow the versions
                file = found[version]
                session.add(
                    WatchedRelease(
                        package=self.package,
                        version=str(version),
                        state=PENDING if version in validated else SEEN,
                        filename=file.filename,
                        sha256=file.sha256,
                    )
                )
            try:
                session.commit()
            except IntegrityError:  # another service process took them first
                session.rollback()
                return
        for version in versions:
            state = PENDING if version in validated else SEEN
            found_line = "event=release_found package=%s version=%s state=%s"
            log.info(found_line, self.package, version, state)

    def _submit_pending(self, found: dict[Version, IndexFile]) -> None:
        with self.sessions() as session:
            pending = list(
                session.scalars(
                    select(WatchedRelease)
                    .where(WatchedRelease.package == self.package, WatchedRelease.state == PENDING)
                    .order_by(WatchedRelease.id)
                )
            )
        for release in pending:
            file = found.get(Version(release.version))
            if file is None:
                self._refuse(release.id, "the index no longer lists a wheel that fits")
                continue
            try:
                self._submit(release.id, file)
            except quotas.TooManyQueued:
                log.info("event=release_waits version=%s (the queue is full)", release.version)
                return
            except BadRelease as exc:
                self._refuse(release.id, str(exc))
            except ApiError as exc:
                self._refuse(release.id, f"{exc.code}: {exc.text}")
            except IndexAway:
                if self._count_attempt(release.id) >= MAX_ATTEMPTS:
                    self._refuse(release.id, f"its download failed {MAX_ATTEMPTS} times")
                raise

    def _submit(self, release_id: int, file: IndexFile) -> None:
        area = uploads.upload_area(self.settings.data_dir)
        fd, name = tempfile.mkstemp(dir=area, prefix="release-", suffix=".part")
        part = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                sha256, size = index.download(
                    self.client, self.origins, file, out, self.settings.watch_max_mb * 1024**2
                )
            version = parse_wheel_filename(file.filename)[1]
            _dist, checked = check_wheel(part, file.filename, version, MAX_UNPACKED_BYTES)
            blob, created = uploads.keep(part, self.settings.data_dir, sha256)
        finally:
            part.unlink(missing_ok=True)
        try:
            build_id = self._insert(release_id, file.filename, sha256, size, checked)
        except BaseException:
            if created:
                blob.unlink(missing_ok=True)
            raise
        if build_id is not None:
            log.info(
                "event=release_submitted package=%s version=%s build=%s sha256=%s",
                self.package,
                checked,
                build_id,
                sha256,
            )
            self.on_queued()

    def _insert(
        self, release_id: int, filename: str, sha256: str, size: int, version: str
    ) -> int | None:
        with self.sessions() as session, quotas.admission(session, self.settings):
            release = session.get(WatchedRelease, release_id, with_for_update=True)
            if release is None or release.state != PENDING:
                return None  # submitted meanwhile
            build = Build(
                source=BuildSource.release,
                version=version,
                sha256=sha256,
                filename=filename,
                size=size,
                branch=RELEASES,
                submitted_by=SUBMITTER,
            )
            session.add(build)
            queue.create_jobs(session, build, self.settings)
            self.announce(session, build)
            release.state, release.build_id, release.reason = SUBMITTED, build.id, ""
            session.commit()
            return build.id

    def _count_attempt(self, release_id: int) -> int:
        with self.sessions() as session:
            release = session.get(WatchedRelease, release_id)
            if release is None:
                return 0
            release.attempts += 1
            session.commit()
            return release.attempts

    def _refuse(self, release_id: int, reason: str) -> None:
        with self.sessions() as session:
            release = session.get(WatchedRelease, release_id)
            if release is None or release.state != PENDING:
                return
            release.state, release.reason = REFUSED, reason[:1000]
            session.commit()
            log.warning(
                "event=release_refused package=%s version=%s reason=%r",
                release.package,
                release.version,
                reason,
            )


async def run(watcher: Watcher, leader: Leader) -> None:
    """Poll while this process holds the periodic lock; the waits are the watcher's."""
    try:
        while True:
            wait = watcher.settings.watch_interval_s
            try:
                if await asyncio.to_thread(leader.holds):
                    wait = await asyncio.to_thread(watcher.poll)
            except Exception:
                log.exception("event=watch_poll_failed")
            await asyncio.sleep(wait)
    finally:
        with contextlib.suppress(Exception):
            watcher.close()
