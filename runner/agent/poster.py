"""One job's line to the service while it runs: its stage results posted as they finish, its lease
kept alive by heartbeats, the wheel fetched and a build's wheel uploaded, each through network
trouble while the lease may still hold (``runner/agent/retry.py``).

A stage result that cannot be posted now (the service is away) is not lost: it waits, in order,
for the next stage's end, and at the job's end it goes into the result the agent keeps on disk
and sends when the service is back (``runner/agent/state.py``). A lease that is lost (409: expired,
re-leased or cancelled; or the service unreachable past the lease) stops the running stage and
every later post of the attempt: a result posted then would belong to a job the service may have
handed to another runner.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import httpx

from core.wire import JobLease, Stage, StageResult
from runner.agent import retry
from runner.agent.client import Client, ServiceError
from runner.pipeline.pipeline import Pipeline
from runner.pipeline.stage_results import stage_log

log = logging.getLogger("fe_ci.agent")

T = TypeVar("T")


class LeaseLost(Exception):
    """The service no longer holds this job for us (expired, re-leased, or cancelled)."""


class Poster:
    """Posts stage results as they finish; keeps those it could not post for the job's end."""

    def __init__(
        self,
        client: Client,
        lease: JobLease,
        pipe: Pipeline,
        *,
        backoff: retry.Backoff,
        heartbeat_s: float | None = None,  # default: a third of the lease
    ) -> None:
        self.client, self.lease, self.pipe = client, lease, pipe
        self.backoff, self.heartbeat_s = backoff, heartbeat_s
        self.lost = False
        self.unsent: list[StageResult] = []  # finished, not yet acknowledged, in order
        self.refused: list[str] = []  # stages the service refused (4xx): said in the job's error
        self.logs: dict[Stage, str] = {}  # each stage's log, sent with it (not kept past the job)
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
        self.unsent.append(result)
        opts = self.pipe.opts
        if (text := stage_log(opts.work_dir, result.name, secrets=opts.secrets)) is not None:
            self.logs[result.name] = text
        try:
            post_stages(self.client, self.lease, self.unsent, self.refused, self.logs)
        except LeaseLost:
            self.abandon()
            return
        except (ServiceError, httpx.TransportError) as exc:
            if isinstance(exc, ServiceError) and exc.fatal:
                raise
            log.warning(
                "event=post_failed job=%s stages_waiting=%s error=%r (kept for the job's end)",
                self.lease.job_id,
                [s.name.value for s in self.unsent],
                exc,
            )

    def abandon(self) -> None:
        """The lease is gone: stop the running stage and report nothing more for this attempt
        (a result posted now would belong to a job the service may have handed to another)."""
        self.lost = True
        self.pipe.cancel.set()

    def past_lease(self, wait_s: float) -> bool:
        return time.monotonic() + wait_s > self.deadline

    def with_retries(self, call: Callable[[], T], what: str) -> T:
        """``call()`` through transient failures while the lease may hold; LeaseLost on 409 or
        once the lease has surely expired."""
        try:
            return retry.call(call, what=what, backoff=self.backoff, give_up=self.past_lease)
        except ServiceError as exc:
            if exc.stale:
                raise LeaseLost(str(exc)) from exc
            if exc.transient:
                raise LeaseLost("the service was unreachable past the lease") from exc
            raise
        except httpx.TransportError as exc:
            raise LeaseLost("the service was unreachable past the lease") from exc

    def heartbeat(self, done: threading.Event) -> None:
        """Extend the lease until ``done``; a cancelled job stops the pipeline, a lost lease
        abandons the attempt."""
        lease = self.lease
        every = self.heartbeat_s or max(0.5, lease.lease_seconds / 3)
        while not done.wait(every):
            try:
                ack = retry.call(
                    lambda: self.client.heartbeat(lease),
                    what="heartbeat",
                    backoff=self.backoff,
                    stop=done,
                    give_up=self.past_lease,
                )
            except retry.Stopped:
                return
            except ServiceError as exc:
                if exc.stale or exc.fatal:
                    log.warning("event=lease_lost job=%s error=%s", lease.job_id, exc)
                else:
                    log.warning("event=lease_abandoned job=%s error=%s", lease.job_id, exc)
                self.abandon()
                return
            except httpx.TransportError:
                log.warning("event=lease_abandoned job=%s (service unreachable)", lease.job_id)
                self.abandon()
                return
            self.deadline = time.monotonic() + seconds_until(ack.lease_expires_at)
            if ack.cancelled:
                log.info("event=job_cancelled job=%s", lease.job_id)
                self.pipe.cancel.set()
                return


def post_stages(
    client: Client,
    lease: JobLease,
    left: list[StageResult],
    refused: list[str],
    logs: dict[Stage, str] | None = None,
) -> None:
    """Post the stages of ``left`` in order, each once, removing each from it as it is stored.

    The first transient failure is raised with the rest still in ``left``; 409 is LeaseLost; any
    other 4xx refuses that one stage (its reason is added to ``refused``, for the job's error) and
    the rest go on. A stage posted twice (its answer lost) is stored once.
    """
    while left:
        try:
            client.post_stage(lease, left[0], (logs or {}).get(left[0].name))
        except ServiceError as exc:
            if exc.stale:
                raise LeaseLost(str(exc)) from exc
            if exc.fatal or exc.transient:
                raise
            log.warning(
                "event=stage_refused job=%s stage=%s error=%s", lease.job_id, left[0].name, exc
            )
            refused.append(f"the service refused the {left[0].name.value} stage: {exc.message}")
        left.pop(0)


def seconds_until(when: datetime) -> float:
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
