"""The runner's HTTP client for the service's runner protocol."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from core.wire import (
    ClaimRequest,
    Environment,
    HeartbeatAck,
    JobFinish,
    JobLease,
    LeasedPost,
    RunnerOffline,
    RunnerRegister,
    RunnerRegistered,
    RunnerResume,
    RunnerResumed,
    StagePost,
    StageResult,
)


class ServiceError(Exception):
    def __init__(
        self, status: int, code: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds, from the answer's Retry-After

    @property
    def fatal(self) -> bool:
        """401/403: this runner's credentials are no good; stop rather than retry."""
        return self.status in (401, 403)

    @property
    def stale(self) -> bool:
        return self.status == 409

    @property
    def transient(self) -> bool:
        """5xx (the service, or a proxy before it, is restarting or overloaded), 408, 429."""
        return self.status >= 500 or self.status in (408, 429)


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date; None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _raise_for(resp: httpx.Response) -> None:
    if resp.is_success:
        return
    try:
        body = resp.json()
        err = body.get("error", {}) if isinstance(body, dict) else {}
    except ValueError:
        err = {}
    raise ServiceError(
        resp.status_code,
        str(err.get("code", "http_error")),
        str(err.get("message", resp.text[:500])),
        retry_after=retry_after(resp.headers.get("retry-after")),
    )


class Client:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def _headers(self, token: str | None = None) -> dict[str, str]:
        tok = token or self.token
        return {"Authorization": f"Bearer {tok}"} if tok else {}

    def _post(
        self, path: str, body: Any, *, token: str | None = None, timeout: float | None = None
    ) -> httpx.Response:
        resp = self.http.post(
            path,
            json=body,
            headers=self._headers(token),
            timeout=timeout if timeout is not None else self.http.timeout,
        )
        _raise_for(resp)
        return resp

    def register(
        self, registration_token: str, name: str, labels: dict[str, str], *, replace: bool = False
    ) -> RunnerRegistered:
        body = RunnerRegister(name=name, labels=labels, replace=replace).model_dump()
        resp = self._post("/api/runners/register", body, token=registration_token)
        return RunnerRegistered.model_validate(resp.json())

    def resume(self, labels: dict[str, str], holding: list[int]) -> RunnerResumed:
        """Come back under the identity (token) kept from an earlier start of this runner."""
        body = RunnerResume(labels=labels, holding=holding).model_dump()
        return RunnerResumed.model_validate(self._post("/api/runners/resume", body).json())

    def offline(self, holding: list[int], timeout: float) -> None:
        """Tell the service this runner is stopping; it keeps the leases of ``holding`` (jobs
        whose results this runner kept to send later) and hands every other back."""
        body = RunnerOffline(holding=holding).model_dump()
        self._post("/api/runners/offline", body, timeout=timeout)

    def claim(self, wait_s: float = 0.0) -> JobLease | None:
        resp = self._post(
            "/api/jobs/claim", ClaimRequest(wait_s=wait_s).model_dump(), timeout=wait_s + 30.0
        )
        if resp.status_code == 204:
            return None
        return JobLease.model_validate(resp.json())

    def heartbeat(self, lease: JobLease) -> HeartbeatAck:
        resp = self._post(
            f"/api/jobs/{lease.job_id}/heartbeat",
            LeasedPost(lease_token=lease.lease_token).model_dump(),
        )
        return HeartbeatAck.model_validate(resp.json())

    def post_stage(self, lease: JobLease, result: StageResult, log: str | None = None) -> None:
        post = StagePost(lease_token=lease.lease_token, result=result, log=log)
        body = post.model_dump(mode="json")
        self._post(f"/api/jobs/{lease.job_id}/stages", body)

    def finish(self, lease: JobLease, environment: Environment, error: str | None = None) -> None:
        body = JobFinish(lease_token=lease.lease_token, environment=environment, error=error)
        self._post(f"/api/jobs/{lease.job_id}/finish", body.model_dump(mode="json"))

    def upload_artifact(self, lease: JobLease, wheel: Path, python_tag: str) -> None:
        """A build job's wheel, streamed as multipart to the service."""
        assert lease.artifact_url
        headers = {
            **self._headers(),
            "X-Lease-Token": lease.lease_token,
            "X-Python-Tag": python_tag,
        }
        with wheel.open("rb") as fh:
            resp = self.http.post(
                lease.artifact_url,
                files={"wheel": (wheel.name, fh, "application/octet-stream")},
                headers=headers,
                timeout=600.0,
            )
        _raise_for(resp)

    def download_wheel(self, lease: JobLease, dest_dir: Path) -> Path:
        """Stream the wheel to disk and check its sha256 against the lease."""
        assert lease.wheel_url and lease.wheel_filename
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / Path(lease.wheel_filename).name
        digest = hashlib.sha256()
        headers = {**self._headers(), "X-Lease-Token": lease.lease_token}
        with self.http.stream("GET", lease.wheel_url, headers=headers, timeout=300.0) as resp:
            if not resp.is_success:
                resp.read()
                _raise_for(resp)
            with open(dest, "wb") as fh:
                for chunk in resp.iter_bytes(1 << 20):
                    digest.update(chunk)
                    fh.write(chunk)
        if lease.wheel_sha256 and digest.hexdigest() != lease.wheel_sha256:
            dest.unlink(missing_ok=True)
            raise ServiceError(0, "digest_mismatch", "the downloaded wheel's sha256 does not match")
        return dest
