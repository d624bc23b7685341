"""``POST /validate``: a wheel (multipart, streamed) or a commit (JSON) becomes a build."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from core import commits
from core.wire import BuildAccepted
from service.config import Settings
from service.deps import SettingsDep, SubmitterDep, get_state, open_session
from service.errors import BadRequest, UploadTooLarge
from service.jobs import queue, quotas
from service.models import Build
from service.openapi import errors
from service.uploads import uploads

log = logging.getLogger("fe_ci.validate")
router = APIRouter(tags=["submit"])

MAX_JSON_BYTES = 64 * 1024  # {"commit": "<40 hex>"} is 52 bytes
_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["wheel"],
                    "properties": {"wheel": {"type": "string", "format": "binary"}},
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["commit"],
                    "properties": {
                        "commit": {"type": "string", "pattern": f"^{commits.FULL_SHA}$"}
                    },
                }
            },
        },
    }
}


def _insert(request: Request, settings: Settings, build: Build) -> BuildAccepted:
    with open_session(request.app) as session, quotas.admission(session, settings):
        session.add(build)
        queue.create_jobs(session, build, settings)
        queue.announce(session, build, get_state(request).reactions)
        session.commit()
        return BuildAccepted(build_id=build.id, url=f"/builds/{build.id}")


async def _read_json(request: Request) -> bytes:
    """The JSON body, refused once it passes MAX_JSON_BYTES (never read whole into memory)."""
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_JSON_BYTES:
            raise UploadTooLarge(
                f"the JSON body is larger than {MAX_JSON_BYTES} bytes",
                detail={"max_bytes": MAX_JSON_BYTES},
            )
    return bytes(raw)


async def _read_commit(request: Request) -> str:
    raw = await _read_json(request)
    try:
        body = json.loads(raw or b"null")
    except ValueError as exc:
        raise BadRequest("the body is not valid JSON") from exc
    commit = body.get("commit") if isinstance(body, dict) else None
    if not isinstance(commit, str) or not commits.is_full_sha(commit.lower()):
        raise BadRequest('send {"commit": "<40 hex digits>"}', detail={"commit": commit})
    return commit.lower()


@router.post(
    "/validate",
    status_code=202,
    response_model=BuildAccepted,
    openapi_extra=_BODY_DOC,
    responses=errors(400, 408, 413, 422, 429, 503),
)
async def create_build(
    request: Request, settings: SettingsDep, submitter: SubmitterDep
) -> BuildAccepted:
    """Submit a frontend wheel or a commit of the frontend repository for validation."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "application/json":
        commit = await _read_commit(request)
        build = Build(
            source="commit", repo=settings.repo_url, commit=commit, submitted_by=submitter
        )
        accepted = await run_in_threadpool(_insert, request, settings, build)
    elif ctype == "multipart/form-data":
        held = get_state(request).held
        with held.upload_slot(request):
            stored = await uploads.receive_wheel(
                request,
                data_dir=settings.data_dir,
                max_bytes=settings.max_upload_bytes,
                checks=held.checks,
            )
        build = Build(
            source="wheel",
            version=stored.version,
            sha256=stored.sha256,
            filename=stored.filename,
            size=stored.size,
            submitted_by=submitter,
        )
        try:
            accepted = await run_in_threadpool(_insert, request, settings, build)
        except BaseException:
            uploads.discard(stored)
            raise
    else:
        raise BadRequest(
            "send multipart/form-data with a 'wheel' file, or application/json with a commit",
            detail={"content_type": ctype or None},
        )
    log.info("event=build_created build=%s source=%s", accepted.build_id, build.source)
    get_state(request).wake.queue_changed()
    return accepted
