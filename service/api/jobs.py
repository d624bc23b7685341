"""The runner protocol's job routes: claim (long poll), heartbeat, post stages, finish, fetch the
wheel, upload a built wheel. A runner registers, resumes and goes offline in ``runners.py``.

Each post carries the lease token of the attempt it belongs to; a stale attempt's token is
refused with 409, so a runner that comes back from the dead cannot overwrite results.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timedelta
from typing import Literal

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy.orm import Session

from core import cells
from core.redaction import redact_text
from core.wire import (
    ClaimRequest,
    HeartbeatAck,
    JobFinish,
    JobKind,
    JobLease,
    JobOutcome,
    JobState,
    LeasedPost,
    Stage,
    StagePost,
)
from core.wire.results import undeclared_configs
from service.deps import (
    IdPath,
    RunnerDep,
    SessionDep,
    SettingsDep,
    StateDep,
    bearer,
    get_settings,
    get_state,
    open_session,
)
from service.errors import BadRequest, Conflict, Forbidden, NotFound, StaleLease, UnknownConfig
from service.jobs import queue, refusal_reuse, surface_reuse, transitions
from service.models import Artifact, Job, Runner, utcnow
from service.openapi import errors
from service.results import (
    determinism_records,
    events,
    feature_regression,
    logs,
    pins,
    remembered_configs,
    trust,
)
from service.results.assemble import store_stage
from service.uploads import uploads

# Tagged with the runner routes: the protocol is one group in the API's documentation.
router = APIRouter(prefix="/api", tags=["runners"])


def _lease(
    request: Request, session: Session, job: Job, token: str, lease_seconds: int
) -> JobLease:
    build = job.build
    gpu = job.kind == JobKind.gpu and job.family is not None
    start_configs = remembered_configs.start_configs(session, job.family) if gpu else []
    at = job.started_at or utcnow()
    cell = pins.cell_of(job)
    comparison = pins.for_lease(session, cell, at) if gpu and cell else []
    wheel_url = str(request.url_for("download_wheel", job_id=job.id)) if build.sha256 else None
    assert job.lease_expires_at is not None
    return JobLease(
        job_id=job.id,
        build_id=build.id,
        kind=JobKind(job.kind),
        family=job.family,
        attempt=job.attempt,
        lease_token=token,
        lease_expires_at=job.lease_expires_at,
        lease_seconds=lease_seconds,
        wheel_url=wheel_url,
        wheel_filename=build.filename,
        wheel_sha256=build.sha256,
        version=build.version,
        stages=[Stage(s) for s in job.stages],
        repo=build.repo,
        commit=build.commit,
        artifact_url=str(request.url_for("upload_artifact", job_id=job.id))
        if job.kind == JobKind.build
        else None,
        start_configs=start_configs,
        subjects=job.subjects,
        comparison=comparison,
        trusted_source=trust.trusted_source(session, build, get_settings(request).repo_url),
        cell=job.cell,
        cudnn=cells.parse_requires(job.requires).get(cells.CUDNN),
        refusal_scope=refusal_reuse.scope(job, build.jobs),
        probe_surface=surface_reuse.reads_surface(job, build.jobs),
    )


def _claim_once(
    request: Request, runner_id: int, since: datetime
) -> JobLease | Literal["gone"] | None:
    state = get_state(request)
    settings = state.settings
    with open_session(request.app) as session:
        runner = queue.seen_claiming(session, runner_id, since)
        if runner is None:  # it said it is stopping while this claim waited
            session.commit()
            return "gone"
        queue.sweep(session, state.reactions)
        got = queue.claim(session, runner, settings.lease_seconds)
        lease = _lease(request, session, *got, settings.lease_seconds) if got else None
        if got:
            events.job_started(session, got[0].build_id, state.reactions)
        session.commit()
        return lease


@router.post("/jobs/claim", response_model=JobLease, responses={204: {"description": "no job"}})
async def claim_job(request: Request, body: ClaimRequest, runner: RunnerDep) -> Response | JobLease:
    """Lease the next job this runner can take, waiting up to ``wait_s`` for one; a claim whose
    runner went away meanwhile (connection closed, or stopping) takes none."""
    since, deadline = utcnow(), time.monotonic() + body.wait_s
    while True:
        if await request.is_disconnected():
            return Response(status_code=204)  # nobody is left to take the answer
        wake = get_state(request).wake
        event = wake.current_event()
        lease = await run_in_threadpool(_claim_once, request, runner.id, since)
        if lease == "gone":
            return Response(status_code=204)
        if isinstance(lease, JobLease):
            if await request.is_disconnected():  # it left as the job was taken: hand it back
                state = get_state(request)
                handed = (state.sessions, lease.job_id, lease.lease_token, state.reactions)
                await run_in_threadpool(queue.hand_back, *handed)
                wake.queue_changed()
                return Response(status_code=204)
            return lease
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Response(status_code=204)
        try:  # woken by a change of the queue here or, on PostgreSQL, on another replica
            recheck = wake.recheck_s()
            await asyncio.wait_for(event.wait(), timeout=min(remaining, recheck))
        except TimeoutError:
            pass


def _leased_job(
    session: Session, runner: Runner, job_id: int, token: str, *, cancelled_ok: bool = False
) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    current = job.lease_token_hash is not None and secrets.compare_digest(
        job.lease_token_hash, queue.hash_token(token)
    )
    if not current:
        # An earlier attempt's token (its lease expired and the job moved on): the late post of
        # a runner that was presumed dead.
        raise StaleLease(f"job {job_id}: stale lease token (attempt {job.attempt} is current)")
    if job.runner_id != runner.id:
        raise Forbidden(f"job {job_id} is not leased to runner {runner.name}")
    if job.state == JobState.cancelled and cancelled_ok:
        return job
    if job.state != JobState.leased:
        raise Conflict(f"job {job_id} is {job.state}")
    expired = job.lease_expires_at
    if expired is not None and expired <= utcnow():
        # Refused at once, whether or not the sweeper has requeued the job yet: a late runner
        # neither posts into an attempt that is over nor keeps it alive by heartbeating.
        raise StaleLease(
            f"job {job_id}: the lease of attempt {job.attempt} expired at "
            f"{expired:%H:%M:%S} UTC; it goes back to the queue",
            detail={"attempt": job.attempt, "lease_expires_at": expired.isoformat()},
        )
    return job


@router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatAck, responses=errors(409))
def heartbeat_job(
    job_id: IdPath, body: LeasedPost, session: SessionDep, runner: RunnerDep, settings: SettingsDep
) -> HeartbeatAck:
    """Extend the lease; the answer says whether the build was cancelled meanwhile."""
    job = _leased_job(session, runner, job_id, body.lease_token, cancelled_ok=True)
    if job.state == JobState.cancelled:
        session.commit()
        return HeartbeatAck(lease_expires_at=job.lease_expires_at or utcnow(), cancelled=True)
    job.lease_expires_at = utcnow() + timedelta(seconds=settings.lease_seconds)
    session.commit()
    return HeartbeatAck(lease_expires_at=job.lease_expires_at)


@router.post("/jobs/{job_id}/stages", status_code=201, responses=errors(400, 409))
def post_stage(
    request: Request,
    job_id: IdPath,
    body: StagePost,
    session: SessionDep,
    runner: RunnerDep,
    settings: SettingsDep,
) -> dict[str, int]:
    """Store one finished stage of the job (idempotent per stage name)."""
    job = _leased_job(session, runner, job_id, body.lease_token)
    if body.result.name not in job.stages:
        raise BadRequest(f"stage {body.result.name} is not part of job {job_id}")
    if bad := undeclared_configs(body.result):  # before anything of the stage is stored
        raise UnknownConfig(
            str(bad), detail={"subject": bad.subject, "config": bad.config, "known": bad.known}
        )
    result = body.result
    if result.name == Stage.probe:
        result = feature_regression.with_line_severity(session, job.build, result)
    # every token the service knows, the posting runner's own among them (stored hashed)
    secrets = logs.secret_values(settings, body.lease_token, bearer(request))
    result = logs.redact_result(result, secrets)
    row = store_stage(session, job, result)
    logs.store(session, job, result.name, body.log, secrets)
    session.flush()
    determinism_records.record_determinism(session, job, body.result, settings.cost_factor)
    if body.result.name == Stage.probe:
        feature_regression.add_line_findings(session, job.build, job)
    session.commit()
    return {"stage_id": row.id}


@router.post("/jobs/{job_id}/finish", response_model=dict[str, str], responses=errors(409))
def finish_job(
    request: Request,
    job_id: IdPath,
    body: JobFinish,
    session: SessionDep,
    runner: RunnerDep,
    state: StateDep,
) -> dict[str, str]:
    """End the job; results posted after this are refused."""
    job = _leased_job(session, runner, job_id, body.lease_token, cancelled_ok=True)
    if job.state == JobState.cancelled:
        return {"state": job.state}
    job.environment = body.environment.model_dump()
    if body.error:
        secrets = logs.secret_values(state.settings, body.lease_token, bearer(request))
        reason = f"error: {redact_text(body.error, secrets)}"
        transitions.end(job, JobOutcome.error, reason, utcnow())
    else:
        transitions.end(job, JobOutcome.ran, "", utcnow())
    job.lease_token_hash = None
    if job.kind == "build":
        queue.release_waiting(session, job.build)
    if job.kind == JobKind.gpu:
        remembered_configs.remember(session, job)
    events.job_changed(session, job.build_id, state.reactions)
    session.commit()
    state.wake.queue_changed()
    return {"state": job.state}


@router.get("/jobs/{job_id}/wheel", name="download_wheel", responses=errors(409))
def download_wheel(
    request: Request, job_id: IdPath, session: SessionDep, runner: RunnerDep
) -> FileResponse:
    """The build's wheel, for the runner holding the job's lease (``X-Lease-Token``)."""
    job = _leased_job(session, runner, job_id, request.headers.get("x-lease-token", ""))
    build = job.build
    if build.sha256 is None or build.filename is None:
        raise NotFound(f"build {build.id} has no wheel yet")
    path = uploads.blob_path(get_settings(request).data_dir, build.sha256)
    if not path.is_file():
        raise NotFound(f"the wheel of build {build.id} is missing from the store")
    session.commit()
    return FileResponse(path, filename=build.filename, media_type="application/octet-stream")


@router.post(
    "/jobs/{job_id}/artifact",
    status_code=201,
    name="upload_artifact",
    responses=errors(400, 408, 409, 413, 422, 503),
)
async def upload_artifact(request: Request, job_id: IdPath, runner: RunnerDep) -> dict[str, str]:
    """A build job's wheel (multipart field ``wheel``), kept by (commit, Python tag)."""
    token = request.headers.get("x-lease-token", "")
    python_tag = request.headers.get("x-python-tag", "")
    await run_in_threadpool(_check_build_lease, request, runner.id, job_id, token)
    state = get_state(request)
    settings = state.settings
    with state.held.upload_slot(request):
        stored = await uploads.receive_wheel(
            request,
            data_dir=settings.data_dir,
            max_bytes=settings.max_upload_bytes,
            checks=state.held.checks,
        )
    try:
        await run_in_threadpool(_record_artifact, request, job_id, stored, python_tag)
    except BaseException:
        uploads.discard(stored)
        raise
    return {"sha256": stored.sha256, "filename": stored.filename}


def _check_build_lease(request: Request, runner_id: int, job_id: int, token: str) -> None:
    with open_session(request.app) as session:
        runner = session.get(Runner, runner_id)
        assert runner is not None
        job = _leased_job(session, runner, job_id, token)
        if job.kind != JobKind.build:
            raise BadRequest(f"job {job_id} is not a build job")


def _record_artifact(request: Request, job_id: int, stored: uploads.StoredWheel, tag: str) -> None:
    with open_session(request.app) as session:
        job = session.get(Job, job_id)
        assert job is not None
        build = job.build
        build.sha256, build.filename, build.size = stored.sha256, stored.filename, stored.size
        build.version = stored.version
        assert build.repo is not None and build.commit is not None
        session.add(
            Artifact(
                repo=build.repo,
                commit=build.commit,
                python_tag=tag or "unknown",
                sha256=stored.sha256,
                filename=stored.filename,
                size=stored.size,
                version=stored.version,
                build_id=build.id,
            )
        )
        session.commit()
