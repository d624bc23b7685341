"""A local recorder of GitHub's REST API, standing in for GitHub, which cannot be reached here.

A real HTTP server on 127.0.0.1 that records every request (method, path, JSON body, headers)
and answers as GitHub documents: ``POST /repos/{o}/{r}/statuses/{sha}`` 201;
``POST /app/installations/{id}/access_tokens`` 201 with ``token`` and ``expires_at``;
``POST /repos/{o}/{r}/check-runs`` 201 with a new ``id``; ``PATCH .../check-runs/{id}`` 200;
``GET /repos/{o}/{r}/commits/{sha}/check-runs?check_name=`` 200 with the runs created so far.

A call is recorded when it is answered (the order GitHub applies them in). For the faults a
sender must ride out: ``status_codes`` answers the next commit-status posts with those codes in
turn (then 201), an entry ``(code, headers)`` with those headers too (GitHub's rate limit);
``down`` answers every one 500, and ``hold`` keeps a status post that matches it unanswered
(``arrived`` has it) until another state of its context arrives, ``release()``, or ``hold_s``
passes; one call is held, then ``hold`` is cleared.
"""

from __future__ import annotations

import dataclasses
import http.server
import itertools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testkit.waiting import eventually

INSTALLATION_TOKEN = "ghs_installation-token-for-tests"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    code: int = 0  # what was answered


class GitHubRecorder:
    def __init__(self) -> None:
        calls: list[Call] = []
        arrived: list[Call] = []
        runs: list[dict[str, Any]] = []
        ids = itertools.count(1001)
        changed = threading.Condition()
        recorder = self
        self.status_codes: list[int | tuple[int, dict[str, str]]] = []
        self.down = False
        self.hold: Callable[[Call], bool] | None = None
        self.hold_s = 5.0
        self.released = threading.Event()
        self.holding = threading.Lock()

        def held_until_newer(call: Call) -> None:
            def newer() -> bool:
                later = arrived[arrived.index(call) + 1 :]
                context = call.body.get("context")
                newer = [
                    c for c in later if c.body.get("context") == context and c.body != call.body
                ]
                return bool(newer) or recorder.released.is_set()

            with changed:
                changed.wait_for(newer, timeout=recorder.hold_s)

        def status_code(call: Call) -> tuple[int, dict[str, str]]:
            hold = recorder.hold
            if hold is not None and hold(call) and recorder.holding.acquire(blocking=False):
                recorder.hold = None  # one call is held
                try:
                    held_until_newer(call)
                finally:
                    recorder.holding.release()
            if recorder.status_codes:
                answer = recorder.status_codes.pop(0)
                return answer if isinstance(answer, tuple) else (answer, {})
            return (500 if recorder.down else 201), {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                call = Call(method, self.path, body, dict(self.headers.items()))
                with changed:
                    arrived.append(call)
                    changed.notify_all()
                code, out, extra = 201, {}, {}
                if "/statuses/" in self.path:
                    code, extra = status_code(call)
                elif self.path.endswith("/access_tokens"):
                    out = {"token": INSTALLATION_TOKEN, "expires_at": "2099-01-01T00:00:00Z"}
                elif method == "GET" and "/check-runs" in self.path:
                    url = urlsplit(self.path)
                    name = parse_qs(url.query).get("check_name", [""])[0]
                    sha = url.path.split("/commits/")[1].split("/")[0]
                    found = [r for r in runs if r["name"] == name and r["head_sha"] == sha]
                    code, out = 200, {"total_count": len(found), "check_runs": found}
                elif self.path.endswith("/check-runs"):
                    out = {"id": next(ids), **body}
                    runs.append(out)
                elif re.search(r"/check-runs/\d+$", self.path):
                    code, out = 200, {"id": int(self.path.rsplit("/", 1)[1]), **body}
                calls.append(dataclasses.replace(call, code=code))
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                self._answer("POST")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

            def do_GET(self) -> None:
                self._answer("GET")

            def log_message(self, *args: object) -> None:
                pass

        self.calls = calls
        self.arrived = arrived
        self._changed = changed
        self.runs = runs
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_until(
        self, predicate: Callable[[list[Call]], object], timeout: float = 15
    ) -> list[Call]:
        """The calls so far, once ``predicate(calls)`` holds; an AssertionError past ``timeout``."""
        return eventually(
            lambda: list(self.calls),
            until=predicate,
            timeout=timeout,
            interval=0.05,
            message=f"GitHub calls ({getattr(predicate, '__name__', 'a condition')})",
        )

    def release(self) -> None:
        """Answer a held call now, and hold none after it."""
        self.hold = None
        with self._changed:
            self.released.set()
            self._changed.notify_all()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
