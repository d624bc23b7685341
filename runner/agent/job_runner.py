"""One claimed job, from its lease to the result the agent keeps: the stages of its pipeline (or,
for a ``build`` job, the build of its commit, ``build.py``), heartbeats beside them and stage
results posted as they finish (``poster.py``), and its work directory removed before the job is
reported finished: once finished, new work may come. The agent (``agent.py``) keeps what this
returns on disk and sends it.
"""

from __future__ import annotations

import logging
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from core.wire import JobLease, Stage
from runner.agent import retry
from runner.agent.client import Client, ServiceError
from runner.agent.poster import LeaseLost, Poster
from runner.agent.state import KeptResult
from runner.config import RunnerSettings
from runner.isolation import sandbox
from runner.isolation.zygotes import Zygotes
from runner.pipeline import pipeline, pipeline_options

log = logging.getLogger("fe_ci.agent")


@dataclass
class JobRunner:
    """What every job of one runner runs with: its settings, its line to the service, its host."""

    settings: RunnerSettings
    client: Client
    gpu: str | None  # the host's GPU model (its ``gpu`` label)
    zygotes: Zygotes | None
    backoff: retry.Backoff
    heartbeat_s: float | None = None  # default: a third of the lease

    def run(self, lease: JobLease) -> KeptResult | None:
        """Run the job; the result to keep and send, or None when its lease was lost (the
        service hands the job out again, and nothing of this attempt is reported)."""
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
            gpu=self.gpu,
            report_unselected=False,
            remembered=list(lease.start_configs),
            zygotes=self.zygotes,
            subjects=lease.subjects,
            comparison=list(lease.comparison),
            trusted_source=lease.trusted_source,
            cudnn=lease.cudnn if lease.kind == "gpu" else None,
            refusal_scope=lease.refusal_scope,
            probe_surface=lease.probe_surface,
        )
        pipe = pipeline.Pipeline(opts)
        poster = Poster(
            self.client,
            lease,
            pipe,
            backoff=self.backoff,
            heartbeat_s=self.heartbeat_s,
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
                    poster.with_retries(
                        lambda: self.client.download_wheel(lease, work / "wheel"), "download"
                    )
                    if lease.wheel_url
                    else None
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
            return None
        errors = [e for e in (error, *poster.refused) if e]
        return KeptResult(
            lease=lease,
            stages=poster.unsent,
            logs={s.name: poster.logs[s.name] for s in poster.unsent if s.name in poster.logs},
            environment=result.environment,
            error="; ".join(errors) or None,
        )

    def _build(self, poster: Poster, work: Path) -> None:
        """A ``build`` job: commit -> wheel, uploaded to the service before the stage is posted."""
        from runner import build

        s, lease, pipe = self.settings, poster.lease, poster.pipe
        assert lease.repo and lease.commit
        pipe.reporter.started(Stage.build)
        # the build runs the commit's code in the candidate's sandbox, and the report says which
        pipe.result.environment = pipe.result.environment.model_copy(
            update={"sandbox": sandbox.isolation()}
        )
        result, built = build.build_commit(s, lease.repo, lease.commit, work, pipe.cancel)
        if built is not None:
            poster.with_retries(
                lambda: self.client.upload_artifact(lease, built.wheel, build.python_tag()),
                "upload",
            )
        pipe.result.stages.append(result)
        pipe.reporter.finished(result)
