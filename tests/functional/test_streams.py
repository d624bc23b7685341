"""Live streams (``/builds/{id}/events``) bounded, on a real service on 127.0.0.1: a cap over the
service and per client address, 503 with ``Retry-After`` past either, slots given back when a
stream ends; and one poll of the database shared by every stream of a build.

A second client address is 127.0.0.2 (the whole 127/8 is loopback on Linux): each stream's socket
binds it as its source before connecting to the service on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from service import state
from service.app import create_app
from service.config import Settings
from service.web import live, live_hub
from testkit import loopback
from testkit.service import ADMIN, REGISTER, SUBMIT, Service
from testkit.waiting import eventually
from tests.helpers import submit_wheel

STREAMS = 20  # streams of one build in the shared-poll test


def open_stream(port: int, build_id: int, source: str = "127.0.0.1") -> tuple[socket.socket, int]:
    """A stream's socket from ``source`` and the status of its answer (its head read)."""
    sock, status, _ = begin(port, build_id, source)
    return sock, status


def begin(port: int, build_id: int, source: str) -> tuple[socket.socket, int, bytes]:
    """A stream's socket, its status and what was read of its answer."""
    sock = socket.socket()
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /builds/{build_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return sock, int(data.split(b" ", 2)[1]), data


def refusal(port: int, build_id: int, source: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The whole answer of a refused stream: its error and its headers."""
    sock, status, data = begin(port, build_id, source)
    with sock:
        while chunk := sock.recv(4096):
            data += chunk
    assert status == 503, data
    head, _, body = data.partition(b"\r\n\r\n")
    headers = dict(
        line.decode().lower().split(": ", 1) for line in head.split(b"\r\n") if b": " in line
    )
    return json.loads(body)["error"], headers


def test_streams_are_capped_in_total_and_per_client(make_service: Any) -> None:
    """Was: any number of anonymous streams, each polling the database (400 took the build
    list's median from 8 ms to 4.9 s). Four per client, six in all here; past either a 503."""
    svc: Service = make_service(FE_CI_MAX_STREAMS="6", FE_CI_MAX_STREAMS_PER_CLIENT="4")
    build_id = submit_wheel(svc)  # no runner: it stays queued and its streams stay open
    with ExitStack() as stack:
        for _ in range(4):
            sock, status = open_stream(svc.port, build_id)
            stack.callback(sock.close)
            assert status == 200
        error, headers = refusal(svc.port, build_id, "127.0.0.1")
        assert error["code"] == "too_many_streams"
        assert error["detail"] == {"max_streams_per_client": 4}
        assert headers["retry-after"] == "5"
        for _ in range(2):  # another client still has room, up to the total
            sock, status = open_stream(svc.port, build_id, "127.0.0.2")
            stack.callback(sock.close)
            assert status == 200
        error, _ = refusal(svc.port, build_id, "127.0.0.2")
        assert error["detail"] == {"max_streams": 6}
        assert loopback.get(f"{svc.url}/api/builds").status_code == 200
    # the streams are gone: their slots come back
    sock, status = eventually(
        lambda: open_stream(svc.port, build_id),
        until=lambda got: got[1] == 200 or bool(got[0].close()),
        timeout=15,
        interval=0.2,
        message="the streams' slots to be given back",
    )
    sock.close()


@contextmanager
def in_process(tmp_path: Path) -> Iterator[tuple[Any, int]]:
    """The service's app under a real uvicorn in a thread on 127.0.0.1 (so the test can count
    what it does), and its port."""
    settings = Settings(
        data_dir=tmp_path / "data",
        submit_token=SUBMIT,
        runner_token=REGISTER,
        admin_token=ADMIN,
        max_streams=STREAMS * 2,
        max_streams_per_client=STREAMS * 2,
        gpu_archs=[],
    )
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        eventually(lambda: server.started, timeout=10, interval=0.02, message="uvicorn")
        yield app, int(server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_streams_of_a_build_share_one_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: each stream took its own snapshot every half second (20 streams for 2 s: 100). Now
    one poll for all: a snapshot per poll, however many streams, and each stream still gets the
    change (the build cancelled) from it."""
    taken: list[int] = []
    real = live.snapshot

    def counted(*args: Any) -> Any:
        taken.append(args[2])
        return real(*args)

    monkeypatch.setattr(live, "snapshot", counted)
    with in_process(tmp_path) as (app, port), ExitStack() as stack:
        svc = Service(data_dir=tmp_path / "data", env={}, port=port)
        build_id = submit_wheel(svc)
        socks = []
        for _ in range(STREAMS):
            sock, status = open_stream(port, build_id)
            stack.callback(sock.close)
            assert status == 200
            socks.append(sock)
        start, before = time.monotonic(), len(taken)
        time.sleep(2.0)
        held_s, polls = time.monotonic() - start, len(taken) - before
        assert polls <= held_s / live_hub.POLL_S + 2, (polls, held_s)
        assert len(taken) < STREAMS  # the first snapshot too is shared
        resp = loopback.post(
            f"http://127.0.0.1:{port}/api/builds/{build_id}/cancel",
            headers={"Authorization": f"Bearer {SUBMIT}"},
        )
        assert resp.status_code == 200, resp.text
        for sock in socks:  # every stream ends with the cancelled build's snapshot
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            assert b'"finished": true' in data, data[-500:]
        assert state.of(app).live_slots.total == 0
