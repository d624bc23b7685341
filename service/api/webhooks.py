"""``POST /api/webhooks/github``: a push to a watched branch becomes one commit build.

A request whose ``X-Hub-Signature-256`` is missing or not exactly ``sha256=`` and 64 hex digits is
refused from its headers, its body unread. At most ``FE_CI_MAX_WEBHOOKS`` bodies are read at once
(the next answers 503 with ``Retry-After``); each is bounded (``FE_CI_WEBHOOK_MAX_KB``) and paced
(``service.uploads.client_limits``) while it streams, hashed as it arrives, and its signature is
verified the moment its last byte is in, before anything is parsed. The repository built is always
``FE_CI_REPO_URL``, never a URL from the payload. A push of a commit that already has a build on
that branch (queued, running or finished) adds none: the answer names the build. Answers fast:
the work is queued.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core import commits
from service.config import Settings
from service.deps import SettingsDep, get_state, open_session
from service.errors import BadRequest, BadSignature, PayloadTooLarge, Unauthorized
from service.jobs import queue
from service.models import Build, WebhookDelivery
from service.openapi import errors

log = logging.getLogger("fe_ci.webhooks")
router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])

_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
# GitHub's delivery ids are GUIDs (36 characters). A longer one is refused rather than cut: cut to
# the column's 100 characters, two ids sharing their first 100 would be one delivery.
MAX_DELIVERY_ID = 100


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HeadCommit(_Loose):
    message: str = ""


class Pusher(_Loose):
    name: str = "push"


class PushEvent(_Loose):
    """The fields of a push that are read; a field of the wrong type is a 400."""

    ref: str
    after: str | None = None
    deleted: bool = False
    head_commit: HeadCommit | None = None
    pusher: Pusher | None = None


def _signature(settings: Settings, header: str) -> str:
    """The 64 hex digits of a well-formed header (lower case); refused otherwise, unread."""
    if not settings.webhook_secret or not header:
        raise BadSignature("missing X-Hub-Signature-256")
    match = _SIGNATURE.fullmatch(header)
    if match is None:
        raise BadSignature(
            "malformed X-Hub-Signature-256: send 'sha256=' and 64 hex digits",
            detail={"length": len(header)},
        )
    return match.group(1).lower()


async def _read_signed(request: Request, secret: str, signature: str, limit: int) -> bytes:
    """The body, refused past ``limit`` bytes (declared or streamed), hashed as it arrives and
    verified against ``signature`` as soon as it is complete."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"the payload declares {declared} bytes; the limit is {limit}",
            detail={"max_bytes": limit},
        )
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(
                f"the payload exceeds the limit of {limit} bytes", detail={"max_bytes": limit}
            )
        mac.update(chunk)
    if not hmac.compare_digest(mac.hexdigest(), signature):
        raise Unauthorized("wrong X-Hub-Signature-256")
    return bytes(body)


def parse_payload(content_type: str, body: bytes) -> dict[str, Any]:
    """GitHub sends JSON, or (its default) a form with the JSON in a ``payload`` field."""
    try:
        if content_type == "application/x-www-form-urlencoded":
            fields = parse_qs(body.decode("utf-8"), strict_parsing=False)
            raw = fields.get("payload", [""])[0]
        else:
            raw = body.decode("utf-8")
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest("the payload is not valid JSON") from exc
    except RecursionError as exc:
        raise BadRequest("the payload's JSON is nested too deeply") from exc
    if not isinstance(data, dict):
        raise BadRequest("the payload is not a JSON object")
    return data


def parse_push(payload: dict[str, Any]) -> PushEvent:
    try:
        return PushEvent.model_validate(payload)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()[:20]]
        raise BadRequest("the push payload has fields of the wrong type", detail=errors) from exc


def _push_decision(settings: Settings, push: PushEvent) -> tuple[str | None, str]:
    """(commit to build or None, what was decided)."""
    ref, after = push.ref, push.after
    if push.deleted or (after is not None and set(after) == {"0"}):
        return None, f"ignored: {ref} was deleted"
    if not ref.startswith("refs/heads/"):
        return None, f"ignored: {ref} is not a branch"
    if ref not in settings.branches:
        return None, f"ignored: {ref} is not watched ({', '.join(settings.branches)})"
    if after is None or not commits.is_full_sha(after):
        raise BadRequest("a push payload needs 'after', a 40-hex commit")
    return after, f"queued {after[:12]} of {ref}"


def _existing_build(session: Session, settings: Settings, branch: str, commit: str) -> Build | None:
    """The newest build of this commit on this branch that was not cancelled."""
    return session.scalars(
        select(Build)
        .where(Build.source == "commit", Build.repo == settings.repo_url)
        .where(Build.branch == branch, Build.commit == commit, Build.cancelled_at.is_(None))
        .order_by(Build.id.desc())
    ).first()


def _record(
    request: Request, settings: Settings, delivery: str, event: str, push: PushEvent | None
) -> dict[str, Any]:
    with open_session(request.app) as session:
        seen = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.delivery == delivery)
        ).first()
        if seen is not None:
            return {"outcome": f"duplicate delivery: {seen.outcome}", "build_id": seen.build_id}
        build_id = None
        commit, outcome = (None, f"ignored: {event} event")
        if push is not None:
            commit, outcome = _push_decision(settings, push)
        if push is not None and commit is not None:
            branch = push.ref.removeprefix("refs/heads/")
            existing = _existing_build(session, settings, branch, commit)
            if existing is not None:
                state = "finished" if existing.finished_at else "queued or running"
                outcome = f"already built: {commit[:12]} of {push.ref} is build {existing.id}"
                outcome += f" ({state})"
                build_id = existing.id
            else:
                build = Build(
                    source="commit",
                    repo=settings.repo_url,
                    commit=commit,
                    branch=branch,
                    message=(push.head_commit.message if push.head_commit else "")[:10000] or None,
                    submitted_by=f"github:{push.pusher.name if push.pusher else 'push'}"[:200],
                )
                session.add(build)
                queue.create_jobs(session, build, settings)
                queue.announce(session, build, get_state(request).reactions)
                build_id = build.id
        session.add(
            WebhookDelivery(delivery=delivery, event=event, outcome=outcome, build_id=build_id)
        )
        try:
            session.commit()
        except IntegrityError:  # the same delivery raced in on another connection
            session.rollback()
            return {"outcome": "duplicate delivery", "build_id": None}
        return {"outcome": outcome, "build_id": build_id, "created": outcome.startswith("queued")}


@router.post("/github", status_code=200, responses=errors(400, 401, 408, 413, 503))
async def receive_github(request: Request, settings: SettingsDep) -> dict[str, Any]:
    """GitHub webhook: ``ping`` and ``push`` (signed with the shared secret)."""
    signature = _signature(settings, request.headers.get("x-hub-signature-256", ""))
    assert settings.webhook_secret is not None
    with get_state(request).held.webhook_slot(request):
        raw = await _read_signed(
            request, settings.webhook_secret, signature, settings.webhook_max_kb * 1024
        )
    event = request.headers.get("x-github-event", "")
    delivery = request.headers.get("x-github-delivery", "")
    if event == "ping":
        return {"outcome": "pong"}
    if not delivery or len(delivery) > MAX_DELIVERY_ID:
        raise BadRequest(
            f"X-GitHub-Delivery must be 1 to {MAX_DELIVERY_ID} characters",
            detail={"length": len(delivery)},
        )
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    push = parse_push(parse_payload(ctype, raw)) if event == "push" else None
    result = await run_in_threadpool(_record, request, settings, delivery, event, push)
    log.info(
        "event=webhook delivery=%s github_event=%s outcome=%r", delivery, event, result["outcome"]
    )
    if result.pop("created", False):
        get_state(request).wake.queue_changed()
    return result
