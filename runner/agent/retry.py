"""How the runner rides out a service that is away: each call to it retried by tenacity.

Retried: the connection failed, broke or timed out (``httpx.TransportError``), or the service, or
a proxy before it, answered 5xx, 408 or 429 (``ServiceError.transient``). Waits grow
exponentially with full jitter (many runners coming back after a restart do not arrive at once),
from ``Backoff.initial_s`` up to ``Backoff.max_s``; an answer's ``Retry-After`` is honoured (up to
five minutes). Never retried: 401/403 (this runner's credentials are no good: it stops) and every
other 4xx (the service has judged the request; the caller decides).

A wait is cut short by the caller's ``stop`` event (SIGTERM, or a job that ended), which raises
``Stopped``; ``give_up`` ends the retries early (a lease that will have expired by then).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import tenacity

from runner.agent.client import ServiceError

log = logging.getLogger("fe_ci.agent")

T = TypeVar("T")

RETRY_AFTER_CAP_S = 300.0  # a longer hint (a misconfigured proxy) must not park a runner for hours


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 1.0
    max_s: float = 30.0


class Stopped(Exception):
    """The runner (or the job) was told to stop while a call waited to be tried again."""


def transient(exc: BaseException) -> bool:
    """Whether trying the same call again later may succeed."""
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ServiceError) and exc.transient


def _wait(backoff: Backoff) -> Callable[[tenacity.RetryCallState], float]:
    jittered = tenacity.wait_random_exponential(multiplier=backoff.initial_s, max=backoff.max_s)

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        hinted = exc.retry_after if isinstance(exc, ServiceError) else None
        if hinted is not None:
            return min(hinted, RETRY_AFTER_CAP_S)
        return float(jittered(state))

    return wait


def _sleep(stop: threading.Event | None) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        if stop is None:
            threading.Event().wait(seconds)
        elif stop.wait(seconds):
            raise Stopped()

    return sleep


def call(
    fn: Callable[[], T],
    *,
    what: str,
    backoff: Backoff,
    stop: threading.Event | None = None,
    give_up: Callable[[float], bool] | None = None,
    also: Callable[[BaseException], bool] | None = None,
) -> T:
    """``fn()``, tried again through transient failures (and those ``also`` names).

    ``give_up(seconds)`` is asked before each wait of that many seconds: true re-raises the last
    failure. A ``stop`` set during a wait raises ``Stopped``. Anything else ``fn`` raises is
    raised at once.
    """

    def retryable(exc: BaseException) -> bool:
        return transient(exc) or (also is not None and also(exc))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "event=retrying call=%s attempt=%s in_s=%.1f error=%r",
            what,
            state.attempt_number,
            state.upcoming_sleep,
            exc,
        )

    def stop_when(state: tenacity.RetryCallState) -> bool:
        return give_up is not None and give_up(state.upcoming_sleep)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(retryable),
        wait=_wait(backoff),
        stop=stop_when,
        sleep=_sleep(stop),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(fn)
