"""One error base class; every subclass declares its code, status and message.

``service.app`` turns any ``ApiError`` (and FastAPI's own validation and HTTP errors) into the one
JSON shape: ``{"error": {"code": ..., "message": ..., "detail": ...}}``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ApiError(Exception):
    code: ClassVar[str] = "error"
    status_code: ClassVar[int] = 400
    message: ClassVar[str] = "bad request"
    # Refused with the rest of its body unread: the connection is closed rather than read on
    # (or mis-framed) while the client is still sending.
    close_connection: ClassVar[bool] = False
    retry_after_s: ClassVar[int | None] = None  # sent as Retry-After (a refusal for now)

    def __init__(self, message: str | None = None, *, detail: Any = None) -> None:
        self.text = message or self.message
        self.detail = detail
        super().__init__(self.text)

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.text, "detail": self.detail}}

    def headers(self) -> dict[str, str]:
        out = {"Connection": "close"} if self.close_connection else {}
        if self.retry_after_s is not None:
            out["Retry-After"] = str(self.retry_after_s)
        return out


class Unauthorized(ApiError):
    code, status_code, message = "unauthorized", 401, "missing or invalid token"


class Forbidden(ApiError):
    code, status_code, message = "forbidden", 403, "this token does not open this door"


class NotFound(ApiError):
    code, status_code, message = "not_found", 404, "no such resource"


class Conflict(ApiError):
    code, status_code, message = "conflict", 409, "conflict"


class RunnerRevoked(Forbidden):
    code, message = "runner_revoked", "this runner name was revoked"


class RunnerNameInUse(Conflict):
    code, message = "runner_name_in_use", "a live runner is registered under this name"


class StaleLease(Conflict):
    code, message = "stale_lease", "this lease is no longer current; results refused"


class BadRequest(ApiError):
    code, status_code, message = "bad_request", 400, "bad request"


class PayloadTooLarge(ApiError):
    code, status_code, message = "payload_too_large", 413, "the request body exceeds its limit"
    close_connection = True


class RequestTimeout(ApiError):
    code, status_code, message = "request_timeout", 408, "the request body stopped arriving"
    close_connection = True


class TooManyRequests(ApiError):
    """Refused at once with its body unread, so a refused client holds no connection."""

    code, status_code, message = "too_many_requests", 503, "too busy; retry in a few seconds"
    close_connection = True
    retry_after_s = 5


class TooManyUploads(TooManyRequests):
    code, message = "too_many_uploads", "too many uploads at once; retry in a few seconds"


class TooManyWebhooks(TooManyRequests):
    code, message = "too_many_webhooks", "too many webhook deliveries at once; redeliver later"


class BadSignature(ApiError):
    """A webhook without a well-formed signature: refused from its headers, the body unread."""

    code, status_code, message = "unauthorized", 401, "missing or malformed X-Hub-Signature-256"
    close_connection = True


class UploadError(ApiError):
    """A rejected upload. Raised before anything reaches the database."""

    code, status_code, message = "invalid_upload", 422, "the upload is not a valid frontend wheel"
    close_connection = True


class UploadTooLarge(UploadError):
    code, status_code, message = "upload_too_large", 413, "the upload exceeds the size limit"


class NotAWheel(UploadError):
    code, message = "not_a_wheel", "the file is not a wheel"


class BadWheelName(UploadError):
    code, message = "bad_wheel_filename", "the file name is not a PEP 427 wheel name"


class WrongDistribution(UploadError):
    code, message = "wrong_distribution", "the wheel is not nvidia-cudnn-frontend"


class UnsafeWheel(UploadError):
    code, message = "unsafe_wheel", "the wheel has unsafe member names or compression"


class UnknownConfig(ApiError):
    code, status_code, message = "unknown_config", 422, "the subject has no such config"


class OffPin(ApiError):
    code, status_code, message = (
        "comparison_not_at_pin",
        422,
        "the comparison was not measured at the subject's comparison point",
    )
