"""A local recorder of GitHub's REST API, standing in for GitHub, which cannot be reached here.

A real HTTP server on 127.0.0.1 that records every request (method, path, JSON body, headers)
and answers as GitHub documents: ``POST /repos/{o}/{r}/statuses/{sha}`` 201;
``POST /app/installations/{id}/access_tokens`` 201 with ``token`` and ``expires_at``;
``POST /repos/{o}/{r}/check-runs`` 201 with a new ``id``; ``PATCH .../check-runs/{id}`` 200;
``GET /repos/{o}/{r}/commits/{sha}/check-runs?check_name=`` 200 with the runs created so far.
"""

from __future__ import annotations

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


class GitHubRecorder:
    def __init__(self) -> None:
        calls: list[Call] = []
        runs: list[dict[str, Any]] = []
        ids = itertools.count(1001)

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                calls.append(Call(method, self.path, body, dict(self.headers.items())))
                code, out = 201, {}
                if self.path.endswith("/access_tokens"):
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
                data = json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
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

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
