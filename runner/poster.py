"""One job's line to the service while it runs: its stage results posted as they finish, its lease
kept alive by heartbeats, each post retried through network trouble while the lease may still hold.

A lease that is lost (409: expired, re-leased or cancelled; or the service unreachable past the
lease) stops the running stage and every later post of the attempt: a result posted then would
belong to a job the service may have handed to another runner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from core.wire import JobLease, Stage, StageResult
from runner.client import Client, ServiceError
from runner.pipeline import Pipeline

log = logging.getLogger("fe_ci.agent")


class LeaseLost(Exception):
    """The service no longer holds this job for us (expired, re-leased, or cancelled)."""


class Poster:
    """Posts stage results as they finish, retrying through network trouble within the lease."""

    def __init__(
        self,
        client: Client,
        lease: JobLease,
        pipe: Pipeline,
        *,
        retry_s: float,
        heartbeat_s: float | None = None,  # default: a third of the lease
    ) -> None:
        self.client, self.lease, self.pipe = client, lease, pipe
        self.retry_s, self.heartbeat_s = retry_s, heartbeat_s
        self.lost = False
        # monotonic time past which the lease is surely gone
        self.deadline = time.monotonic() + seconds_until(lease.lease_expires_at)

    def started(self, stage: Stage) -> None:
        log.info("event=stage_started job=%s stage=%s", self.lease.job_id, stage)

    def finished(self, result: StageResult) -> None:
        log.info(
            "event=stage_finished job=%s stage=%s status=%s duration_s=%.1f",
            self.lease.job_id,
            result.name,
            result.status,
            result.duration_s,
        )
        if self.lost:
            return
        try:
            self.with_retries(lambda: self.client.post_stage(self.lease, result))
        except LeaseLost:
            self.abandon()

    def abandon(self) -> None:
        """The lease is gone: stop the running stage and report nothing more for this attempt
        (a result posted now would belong to a job the service may have handed to another)."""
        self.lost = True
        self.pipe.cancel.set()

    def with_retries(self, call: Callable[[], object]) -> None:
        """Call until it succeeds, the lease is lost (409), or the lease has surely expired."""
        while True:
            try:
                call()
                return
            except ServiceError as exc:
                if exc.stale:
                    raise LeaseLost(str(exc)) from exc
                if exc.fatal:
                    raise
                log.warning("event=post_failed error=%s", exc)
            except httpx.TransportError as exc:
                log.warning("event=post_failed error=%r", exc)
            if time.monotonic() > self.deadline:
                raise LeaseLost("the service was unreachable past the lease")
            time.sleep(self.retry_s)

    def heartbeat(self, done: threading.Event) -> None:
        """Extend the lease until ``done``; a cancelled job stops the pipeline, a lost lease
        abandons the attempt."""
        lease = self.lease
        every = self.heartbeat_s or max(0.5, lease.lease_seconds / 3)
        wait = every
        while not done.wait(wait):
            # After a failure, try again soon: the lease runs on while the service is away.
            wait = min(every, self.retry_s)
            try:
                ack = self.client.heartbeat(lease)
            except ServiceError as exc:
                if exc.stale or exc.fatal:
                    log.warning("event=lease_lost job=%s error=%s", lease.job_id, exc)
                    self.abandon()
                    return
                log.warning("event=heartbeat_failed job=%s error=%s", lease.job_id, exc)
                continue
            except httpx.TransportError as exc:
                if time.monotonic() > self.deadline:
                    log.warning("event=lease_abandoned job=%s (service unreachable)", lease.job_id)
                    self.abandon()
                    return
                log.warning("event=heartbeat_failed job=%s error=%r", lease.job_id, exc)
                continue
            wait = every
            self.deadline = time.monotonic() + seconds_until(ack.lease_expires_at)
            if ack.cancelled:
                log.info("event=job_cancelled job=%s", lease.job_id)
                self.pipe.cancel.set()
                return


def seconds_until(when: datetime) -> float:
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
