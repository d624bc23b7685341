"""The agent loop: start (resume or register), claim (long poll), run, heartbeat, report, repeat.

The runner rides out a service that is away: every call to it is retried with jittered
exponential back-off (``runner/agent/retry.py``), and only 401/403 stop it (exit 3, saying why). A
finished job's result is kept on disk before it is sent and sent when the service is back, by this
process or the next one (``runner/agent/state.py``), which also keeps the runner's issued token so
that a restart resumes the runner instead of registering it anew. A SIGTERM ends an idle runner's
long poll at once: the claim waits in a thread of its own, and the service, told the runner is going
offline, gives that claim no job. Running one job is ``job_runner.py``; what a job tells the
service while it runs (stage results, heartbeats) is ``poster.py``; the stages are
``pipeline.py``, and the build of a commit is ``build.py``.
"""

from __future__ import annotations

import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TypeVar

import httpx

from core.wire import JobLease, RunnerRegistered
from runner.agent import labels as host_labels
from runner.agent import retry
from runner.agent.client import Client, ServiceError
from runner.agent.job_runner import JobRunner
from runner.agent.poster import LeaseLost, post_stages
from runner.agent.state import Identity, KeptResult, State
from runner.cache import compile_cache
from runner.config import RunnerSettings
from runner.envs import host, layer_use
from runner.isolation import zygotes

log = logging.getLogger("fe_ci.agent")

T = TypeVar("T")


@dataclass
class Intervals:
    poll_s: float = 2.0
    claim_wait_s: float = 20.0
    heartbeat_s: float | None = None  # default: a third of the lease
    backoff: retry.Backoff = field(default_factory=retry.Backoff)
    offline_timeout_s: float = 3.0  # a stopping runner tells the service once, briefly


def _name_in_use(exc: BaseException) -> bool:
    return isinstance(exc, ServiceError) and exc.code == "runner_name_in_use"


def why_refused(exc: ServiceError) -> str:
    """What a 401/403 from the service means for this runner, in words."""
    if exc.status == 403:
        return (
            "this runner was revoked: an operator lifts it with POST /api/runners/{id}/reinstate "
            "(registration token), then start it again"
        )
    return (
        "the service does not accept this runner's tokens: check FE_CI_RUNNER_TOKEN (the "
        "registration token) against the service's"
    )


class Agent:
    def __init__(
        self,
        settings: RunnerSettings,
        *,
        once: bool = False,
        intervals: Intervals | None = None,
    ) -> None:
        self.settings = settings
        self.once = once
        self.intervals = intervals or Intervals(
            poll_s=settings.poll_interval_s,
            claim_wait_s=settings.claim_wait_s,
            backoff=retry.Backoff(settings.retry_initial_s, settings.retry_max_s),
        )
        self.stop = threading.Event()
        self.labels = host_labels.host_labels(settings.runner_labels)
        self.client = Client(settings.url)
        self.state = State(settings.cache_dir, settings.runner_name)
        self.zygotes = (
            zygotes.Zygotes(
                Path(settings.cache_dir) / "zygotes",
                uid_range=settings.uid_range(),
                hidden=settings.private_dirs(),
            )
            if settings.warm_workers
            else None
        )
        self.jobs = JobRunner(
            settings,
            self.client,
            gpu=self.labels.get("gpu"),
            zygotes=self.zygotes,
            backoff=self.intervals.backoff,
            heartbeat_s=self.intervals.heartbeat_s,
        )

    # ---------------------------------------------------------------- lifecycle

    def install_signal_handlers(self) -> None:
        def _graceful(signum: int, _frame: FrameType | None) -> None:
            log.info("event=stop_requested signal=%s (idle: now; busy: after the job)", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _graceful)
        signal.signal(signal.SIGINT, _graceful)

    def _call(
        self, fn: Callable[[], T], what: str, also: Callable[[BaseException], bool] | None = None
    ) -> T:
        """``fn()`` through any outage of the service, until it answers or the runner stops."""
        return retry.call(fn, what=what, backoff=self.intervals.backoff, stop=self.stop, also=also)

    def start(self) -> None:
        """Resume the identity kept on disk, else register; then send what an earlier process
        of this runner kept. Raises ``retry.Stopped`` when stopped meanwhile."""
        identity = self.state.identity(self.settings.url)
        if identity is None or not self.resume(identity):
            self.register()
        for path, kept in self.state.kept():
            self.send(path, kept)

    def resume(self, identity: Identity) -> bool:
        """Come back under the kept token; False if the service no longer knows it (401)."""
        self.client.token = identity.token
        holding = self.state.holding()
        try:
            back = self._call(lambda: self.client.resume(self.labels, holding), "resume")
        except ServiceError as exc:
            if exc.status != 401:
                raise
            log.warning("event=credentials_refused runner=%s (registering anew)", identity.name)
            self.state.forget_identity()
            self.client.token = None
            return False
        log.info(
            "event=resumed runner=%s id=%s labels=%s handed_back=%s",
            back.name,
            back.runner_id,
            self.labels,
            back.handed_back,
        )
        return True

    def register(self) -> None:
        """Register, waiting while a live runner holds the name (or ``--replace`` it)."""
        token = self.settings.token("runner_token")
        if not token:
            raise ServiceError(401, "no_token", "set FE_CI_RUNNER_TOKEN (the registration token)")
        name, replace = self.settings.runner_name, self.settings.runner_replace

        def register_once() -> RunnerRegistered:
            try:
                return self.client.register(token, name, self.labels, replace=replace)
            except ServiceError as exc:
                if _name_in_use(exc):  # a runner of this name, not stopped, without our token
                    log.warning("event=name_in_use runner=%s (waiting; or --replace)", name)
                raise

        reg = self._call(register_once, "register", also=_name_in_use)
        self.client.token = reg.token
        self.state.save_identity(
            Identity(url=self.settings.url, runner_id=reg.runner_id, name=reg.name, token=reg.token)
        )
        log.info("event=registered runner=%s id=%s labels=%s", reg.name, reg.runner_id, self.labels)

    def run(self) -> int:
        """Returns the process exit status: 0 on a clean stop, 3 when the service refuses us or
        this host cannot run jobs. A clean stop tells the service, so the runner shows offline at
        once rather than alive until its last call ages out."""
        problem = preflight()
        if problem is not None:
            log.error("event=cannot_start reason=%r", problem)
            return 3
        if self.settings.host_bytecode:
            event, words = host.compile_bytecode(host.host_torch())
            (log.info if event == "ok" else log.warning)("event=host_bytecode_%s %s", event, words)
        try:
            code = self._serve()
            if code == 0 and self.client.token:
                self._say_offline()
            return code
        finally:
            self.client.close()
            if self.zygotes is not None:
                self.zygotes.close()

    def _say_offline(self) -> None:
        """Once, briefly: a stopping runner does not wait for a service that is away."""
        try:
            self.client.offline(self.state.holding(), timeout=self.intervals.offline_timeout_s)
            log.info("event=offline runner=%s", self.settings.runner_name)
        except (ServiceError, httpx.TransportError) as exc:
            log.warning("event=offline_not_told error=%r", exc)

    def _serve(self) -> int:
        try:
            self.start()
            while not self.stop.is_set():
                asked = time.monotonic()
                lease = self._claim()
                if lease is None:
                    if self.once:
                        return 0
                    if not self._held(time.monotonic() - asked):
                        self.stop.wait(self._jitter(self.intervals.poll_s))
                    continue
                self.run_job(lease)
                if self.once:
                    return 0
                # straight back to claiming: there is likely another job waiting
        except retry.Stopped:
            return 0
        except ServiceError as exc:
            if exc.fatal:
                log.error("event=refused_by_service error=%s why=%r", exc, why_refused(exc))
                return 3
            raise
        return 0

    def _claim(self) -> JobLease | None:
        """One claim (long poll), waited on in a thread of its own so that a stop ends the wait
        at once (``retry.Stopped``). The abandoned claim takes no job: the service is told the
        runner is going offline, and sees its connection close when the process exits."""
        outcome: list[JobLease | BaseException | None] = []
        done = threading.Event()
        wait_s = self.intervals.claim_wait_s

        def claim() -> None:
            try:
                outcome.append(self._call(lambda: self.client.claim(wait_s=wait_s), "claim"))
            except BaseException as exc:
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=claim, name="claim", daemon=True).start()
        while not done.wait(0.1):
            if self.stop.is_set():
                raise retry.Stopped()
        got = outcome[0]
        if isinstance(got, BaseException):
            raise got
        return got

    def _held(self, waited_s: float) -> bool:
        """Whether the service held an empty claim as a long poll: then claim again at once (a
        pause would leave a job submitted meanwhile waiting); a quick empty answer backs off."""
        return self.intervals.claim_wait_s > 0 and waited_s >= self.intervals.claim_wait_s / 2

    @staticmethod
    def _jitter(base: float) -> float:
        return base * (0.5 + random.random())

    def send(self, path: Path, kept: KeptResult) -> None:
        """Send a kept result (its stages not yet acknowledged, then the job's end) through any
        outage, and remove it once the service has it, or has refused it for good (409: the
        lease is gone). Raises ``retry.Stopped``, keeping it, when the runner stops first."""
        lease, refused = kept.lease, list[str]()
        try:
            self._call(
                lambda: post_stages(self.client, lease, kept.stages, refused, kept.logs), "stages"
            )
            error = "; ".join(e for e in (kept.error, *refused) if e) or None
            self._call(lambda: self.client.finish(lease, kept.environment, error), "finish")
        except (LeaseLost, ServiceError) as exc:
            if isinstance(exc, ServiceError) and exc.fatal:
                raise
            log.warning(
                "event=kept_result_dropped job=%s attempt=%s reason=%s",
                lease.job_id,
                lease.attempt,
                exc,
            )
        else:
            log.info("event=job_finished job=%s attempt=%s", lease.job_id, lease.attempt)
        path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- one job

    def run_job(self, lease: JobLease) -> None:
        """Run the job (``job_runner.py``), keep its result on disk, then send it; then the
        dependency layers and the compile cache back within their budgets."""
        try:
            self._run_job(lease)
        finally:
            self.bound_caches()

    def bound_caches(self) -> None:
        """The dependency layers and the compile cache back within their budgets
        (``runner/lru.py``)."""
        s = self.settings
        try:
            layer_use.evict(s.layers_path(), int(s.layers_max_gb * 1e9), s.cache_unused_s)
            store = compile_cache.Store(s.compile_cache_path())
            store.evict(int(s.compile_cache_max_gb * 1e9), s.cache_unused_s)
        except OSError as exc:  # a full or read-only disk: the next job tries again
            log.warning("event=cache_bound_failed error=%s", exc)

    def _run_job(self, lease: JobLease) -> None:
        kept = self.jobs.run(lease)
        if kept is None:  # the lease was lost: nothing of the attempt is reported
            return
        path = self.state.keep(kept)  # on disk before it is sent: an outage or a restart keeps it
        log.info(
            "event=result_kept job=%s attempt=%s stages_unsent=%s",
            lease.job_id,
            lease.attempt,
            len(kept.stages),
        )
        self.send(path, kept)


def preflight() -> str | None:
    """Why this host cannot run jobs, or None. A runner without torch would only fail every job
    (or, worse, let a candidate's install pull some torch from the index), so it does not start."""
    if host.host_torch() is None:
        return (
            f"this runner's Python ({sys.executable}) has no torch; the runner reuses the host's "
            "torch in every candidate environment. Install it beside fe-ci (for example "
            '`./scripts/install DIR "" torch==2.13.0`) and start the runner from there'
        )
    return None
