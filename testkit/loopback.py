"""HTTP to the services that tests and benchmarks start on 127.0.0.1: httpx's calls, with one TLS
context per process instead of one per call.

httpx builds a new SSL context (its CA bundle read and parsed) for every client, and so for every
module-level ``httpx.get``: about 29 ms of CPU on a 2-core development VM, where a service spends
5-8 ms answering the request. Tests make thousands of such calls while they wait on builds, so
theirs go through these. Each call still opens a connection of its own, as ``httpx.get`` does: a
test of a service that restarts on the same port must not meet a stale keep-alive connection.
"""

from __future__ import annotations

import functools
import ssl
from contextlib import AbstractContextManager
from typing import Any

import httpx


@functools.cache
def tls() -> ssl.SSLContext:
    """The one context of this process (never used on loopback's plain HTTP, but httpx builds
    one for every client it makes unless given one)."""
    return httpx.create_ssl_context()


def _verified(kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` with the process's context, unless the caller gives its own (a proxy's TLS)."""
    return {"verify": tls(), **kw}


def request(method: str, url: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, url, **_verified(kw))


def get(url: str, **kw: Any) -> httpx.Response:
    return httpx.get(url, **_verified(kw))


def head(url: str, **kw: Any) -> httpx.Response:
    return httpx.head(url, **_verified(kw))


def post(url: str, **kw: Any) -> httpx.Response:
    return httpx.post(url, **_verified(kw))


def stream(method: str, url: str, **kw: Any) -> AbstractContextManager[httpx.Response]:
    return httpx.stream(method, url, **_verified(kw))


def client(**kw: Any) -> httpx.Client:
    """A client of its own (its connections kept for its life), on the process's context."""
    return httpx.Client(**_verified(kw))
