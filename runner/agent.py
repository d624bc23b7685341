"""The agent loop: register, claim (long poll, jittered back-off), run, heartbeat, report, repeat.

Unrecoverable answers (401/403) stop the loop; network trouble is retried with a warning. A job's
work directory is removed before it is reported finished: once finished, new work may come. What
a job tells the service while it runs (stage results, heartbeats) is ``poster.py``; the stages are
``pipeline.py``, and the build of a commit is ``build.py``.
"""

from __future__ import annotations

import logging
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from core.wire import JobLease, Stage
from runner import envs, pipeline, pipeline_options, zygotes
from runner import labels as host_labels
from runner.client import Client, ServiceError
from runner.config import RunnerSettings
from runner.poster import LeaseLost, Poster

log = logging.getLogger("fe_ci.agent")


@dataclass
class Intervals:
    poll_s: float = 2.0
    claim_wait_s: float = 20.0
    heartbeat_s: float | None = None  # default: a third of the lease
    retry_s: float = 1.0


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
            poll_s=settings.poll_interval_s, claim_wait_s=settings.claim_wait_s
        )
        self.stop = threading.Event()
        self.labels = host_labels.host_labels(settings.runner_labels)
        self.client = Client(settings.url)
        self.zygotes = (
            zygotes.Zygotes(Path(settings.cache_dir) / "zygotes") if settings.warm_workers else None
        )
        self.jobs_done = 0

    # ---------------------------------------------------------------- lifecycle

    def install_signal_handlers(self) -> None:
        def _graceful(signum: int, _frame: FrameType | None) -> None:
            log.info("event=stop_requested signal=%s (finishing the current job)", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, _graceful)
        signal.signal(signal.SIGINT, _graceful)

    def register(self) -> bool:
        """Register, waiting while a live runner holds the name; False if stopped meanwhile."""
        token = self.settings.token("runner_token")
        if not token:
            raise ServiceError(401, "no_token", "set FE_CI_RUNNER_TOKEN (the registration token)")
        name, replace = self.settings.runner_name, self.settings.runner_replace
        while True:
            try:
                reg = self.client.register(token, name, self.labels, replace=replace)
                break
            except ServiceError as exc:
                if exc.code != "runner_name_in_use":
                    raise
                # This runner restarted before its old self went offline: wait for that.
                log.warning("event=name_in_use runner=%s retry_in_s=%s (or --replace)", name, 10)
                if self.stop.wait(self._jitter(10.0)):
                    return False
        self.client.token = reg.token
        log.info("event=registered runner=%s id=%s labels=%s", reg.name, reg.runner_id, self.labels)
        return True

    def run(self) -> int:
        """Returns the process exit status: 0 on a clean stop, 3 when the service refuses us or
        this host cannot run jobs. A clean stop tells the service, so the runner shows offline at
        once rather than alive until its last call ages out."""
        problem = preflight()
        if problem is not None:
            log.error("event=cannot_start reason=%r", problem)
            return 3
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
        try:
            self.client.offline()
            log.info("event=offline runner=%s", self.settings.runner_name)
        except (ServiceError, httpx.TransportError) as exc:
            log.warning("event=offline_not_told error=%r", exc)

    def _serve(self) -> int:
        try:
            if not self.register():
                return 0
            while not self.stop.is_set():
                asked = time.monotonic()
                try:
                    lease = self.client.claim(wait_s=self.intervals.claim_wait_s)
                except httpx.TransportError as exc:
                    log.warning("event=service_unreachable error=%r", exc)
                    self.stop.wait(self._jitter(self.intervals.poll_s))
                    continue
                if lease is None:
                    if self.once:
                        return 0
                    if not self._held(time.monotonic() - asked):
                        self.stop.wait(self._jitter(self.intervals.poll_s))
                    continue
                self.run_job(lease)
                self.jobs_done += 1
                if self.once:
                    return 0
                # straight back to claiming: there is likely another job waiting
        except ServiceError as exc:
            if exc.fatal:
                log.error("event=refused_by_service error=%s", exc)
                return 3
            raise
        return 0

    def _held(self, waited_s: float) -> bool:
        """Whether the service held an empty claim as a long poll: then claim again at once (a
        pause would leave a job submitted meanwhile waiting); a quick empty answer backs off."""
        return self.intervals.claim_wait_s > 0 and waited_s >= self.intervals.claim_wait_s / 2

    @staticmethod
    def _jitter(base: float) -> float:
        return base * (0.5 + random.random())

    # ---------------------------------------------------------------- one job

    def _build(self, poster: Poster, work: Path) -> None:
        """A ``build`` job: commit -> wheel, uploaded to the service before the stage is posted."""
        from runner import build

        s, lease, pipe = self.settings, poster.lease, poster.pipe
        assert lease.repo and lease.commit
        pipe.reporter.started(Stage.build)
        result, built = build.build_commit(s, lease.repo, lease.commit, work, pipe.cancel)
        if built is not None:
            poster.with_retries(
                lambda: self.client.upload_artifact(lease, built.wheel, build.python_tag())
            )
        pipe.result.stages.append(result)
        pipe.reporter.finished(result)

    def run_job(self, lease: JobLease) -> None:
        s = self.settings
        log.info(
            "event=job_claimed job=%s build=%s kind=%s family=%s attempt=%s",
            lease.job_id,
            lease.build_id,
            lease.kind,
            lease.family,
            lease.attempt,
        )
        work = Path(s.cache_dir) / "jobs" / f"job-{lease.job_id}-{lease.attempt}"
        opts = pipeline_options.Options.from_settings(
            s,
            stages=list(lease.stages),
            work_dir=work,
            family=lease.family if lease.kind == "gpu" else None,
            gpu=self.labels.get("gpu"),
            report_unselected=False,
            remembered=list(lease.start_configs),
            zygotes=self.zygotes,
            subjects=lease.subjects,
        )
        pipe = pipeline.Pipeline(opts)
        poster = Poster(
            self.client,
            lease,
            pipe,
            retry_s=self.intervals.retry_s,
            heartbeat_s=self.intervals.heartbeat_s,
        )
        pipe.reporter = poster
        done = threading.Event()
        beat = threading.Thread(target=poster.heartbeat, args=(done,), daemon=True)
        beat.start()
        error: str | None = None
        try:
            if lease.kind == "build":
                self._build(poster, work)
                result = pipe.result
            else:
                wheel = (
                    self.client.download_wheel(lease, work / "wheel") if lease.wheel_url else None
                )
                result = pipe.run(wheel)
        except LeaseLost:
            poster.lost = True
            result = pipe.result
        except ServiceError as exc:
            if exc.stale:
                poster.lost = True
            else:
                error = str(exc)
            result = pipe.result
        except Exception as exc:  # the runner's own failure: report it, keep serving
            log.exception("event=job_failed job=%s", lease.job_id)
            error = f"{type(exc).__name__}: {exc}"
            result = pipe.result
        finally:
            done.set()
            beat.join(timeout=5)
            shutil.rmtree(work, ignore_errors=True)
        if poster.lost:
            log.warning(
                "event=job_abandoned job=%s attempt=%s work_dir_removed=%s",
                lease.job_id,
                lease.attempt,
                not work.exists(),
            )
            return
        try:
            poster.with_retries(lambda: self.client.finish(lease, result.environment, error))
            log.info("event=job_finished job=%s", lease.job_id)
        except LeaseLost as exc:
            log.warning("event=job_abandoned job=%s reason=%s", lease.job_id, exc)


def preflight() -> str | None:
    """Why this host cannot run jobs, or None. A runner without torch would only fail every job
    (or, worse, let a candidate's install pull some torch from the index), so it does not start."""
    if envs.host_torch() is None:
        return (
            f"this runner's Python ({sys.executable}) has no torch; the runner reuses the host's "
            "torch in every candidate environment. Install it beside fe-ci (for example "
            '`./scripts/install DIR "" torch==2.13.0`) and start the runner from there'
        )
    return None
