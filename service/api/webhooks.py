"""``POST /api/webhooks/github``: a push to a watched branch becomes one commit build.

The signature is checked over the raw body before anything is parsed. The repository built is
always ``FE_CI_REPO_URL``, never a URL from the payload. Answers fast: the work is queued.
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
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service import notify, queue
from service.config import Settings
from service.deps import SettingsDep
from service.errors import BadRequest, Unauthorized
from service.models import Build, WebhookDelivery

log = logging.getLogger("fe_ci.webhooks")
router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])

_SHA = re.compile(r"^[0-9a-f]{40}$")
MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB


def signature_ok(secret: str | None, body: bytes, header: str | None) -> bool:
    if not secret or not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header[len("sha256=") :])


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
    if not isinstance(data, dict):
        raise BadRequest("the payload is not a JSON object")
    return data


def _push_decision(settings: Settings, payload: dict[str, Any]) -> tuple[str | None, str]:
    """(commit to build or None, what was decided)."""
    ref = payload.get("ref")
    after = payload.get("after")
    if not isinstance(ref, str):
        raise BadRequest("a push payload needs 'ref'")
    if payload.get("deleted") or (isinstance(after, str) and set(after) == {"0"}):
        return None, f"ignored: {ref} was deleted"
    if not ref.startswith("refs/heads/"):
        return None, f"ignored: {ref} is not a branch"
    if ref not in settings.branches:
        return None, f"ignored: {ref} is not watched ({', '.join(settings.branches)})"
    if not isinstance(after, str) or not _SHA.match(after):
        raise BadRequest("a push payload needs 'after', a 40-hex commit")
    return after, f"queued {after[:12]} of {ref}"


def _record(
    request: Request, settings: Settings, delivery: str, event: str, payload: dict[str, Any]
) -> dict[str, Any]:
    session: Session
    with request.app.state.sessions() as session:
        seen = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.delivery == delivery)
        ).first()
        if seen is not None:
            return {"outcome": f"duplicate delivery: {seen.outcome}", "build_id": seen.build_id}
        build_id = None
        commit, outcome = (None, f"ignored: {event} event")
        if event == "push":
            commit, outcome = _push_decision(settings, payload)
        if commit is not None:
            head = payload.get("head_commit") or {}
            build = Build(
                source="commit",
                repo=settings.repo_url,
                commit=commit,
                branch=str(payload["ref"]).removeprefix("refs/heads/"),
                message=str(head.get("message", ""))[:10000] or None,
                submitted_by=f"github:{(payload.get('pusher') or {}).get('name', 'push')}",
            )
            session.add(build)
            queue.create_jobs(session, build, settings)
            queue.announce(session, build)
            build_id = build.id
        session.add(
            WebhookDelivery(delivery=delivery, event=event, outcome=outcome, build_id=build_id)
        )
        try:
            session.commit()
        except IntegrityError:  # the same delivery raced in on another connection
            session.rollback()
            return {"outcome": "duplicate delivery", "build_id": None}
        return {"outcome": outcome, "build_id": build_id}


@router.post("/github", status_code=200)
async def receive_github(request: Request, settings: SettingsDep) -> dict[str, Any]:
    """GitHub webhook: ``ping`` and ``push`` (signed with the shared secret)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BadRequest("the payload exceeds 25 MB")
    raw = bytes(body)
    if not signature_ok(settings.webhook_secret, raw, request.headers.get("x-hub-signature-256")):
        raise Unauthorized("missing or wrong X-Hub-Signature-256")
    event = request.headers.get("x-github-event", "")
    delivery = request.headers.get("x-github-delivery", "")
    if event == "ping":
        return {"outcome": "pong"}
    if not delivery:
        raise BadRequest("missing X-GitHub-Delivery")
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    payload = parse_payload(ctype, raw) if event == "push" else {}
    result = await run_in_threadpool(_record, request, settings, delivery[:100], event, payload)
    log.info(
        "event=webhook delivery=%s github_event=%s outcome=%r", delivery, event, result["outcome"]
    )
    if result.get("build_id"):
        notify.queue_changed(request.app)
    return result
