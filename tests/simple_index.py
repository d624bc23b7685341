"""A package index on 127.0.0.1 for the release watcher's tests: a real ``http.server`` that
serves one project's simple API page (PEP 691 JSON or PEP 503 HTML, or 503 while "down") and
the real registry wheels it lists, and records every request it answered."""

from __future__ import annotations

import hashlib
import html
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
PROJECT = "nvidia-cudnn-frontend"


@dataclass
class Listed:
    path: Path
    url: str | None = None  # None: served by this index at /files/<name>
    sha256: str | None = None  # None: the file's own


@dataclass
class SimpleIndex:
    port: int = 0
    mode: Literal["json", "html", "down"] = "json"
    files: list[Listed] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)  # path -> Location
    drip_s: float = 0.0  # > 0: a file is sent a KiB at a time, this long apart
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple/"

    def publish(self, wheel: Path, *, url: str | None = None, sha256: str | None = None) -> None:
        with self.lock:
            self.files.append(Listed(wheel, url, sha256))

    def seen(self, prefix: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.startswith(prefix))

    def page_polls(self) -> int:
        return self.seen(f"/simple/{PROJECT}/")

    def _entries(self) -> list[tuple[str, str, str]]:
        out = []
        for f in self.files:
            sha = f.sha256 or hashlib.sha256(f.path.read_bytes()).hexdigest()
            out.append((f.path.name, f.url or f"/files/{f.path.name}", sha))
        return out

    def page(self, accept: str) -> tuple[str, bytes]:
        with self.lock:
            entries = self._entries()
        if self.mode == "json" and JSON_TYPE in accept:
            body = {
                "meta": {"api-version": "1.1"},
                "name": PROJECT,
                "files": [
                    {"filename": n, "url": u, "hashes": {"sha256": s}} for n, u, s in entries
                ],
            }
            return JSON_TYPE, json.dumps(body).encode()
        links = "".join(
            f'<a href="{html.escape(u)}#sha256={s}">{html.escape(n)}</a><br>\n'
            for n, u, s in entries
        )
        return "text/html", f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode()

    def file(self, name: str) -> bytes | None:
        with self.lock:
            found = [f.path for f in self.files if f.path.name == name]
        return found[0].read_bytes() if found else None


def _handler(index: SimpleIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _drip(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for at in range(0, len(body), 1024):
                try:
                    self.wfile.write(body[at : at + 1024])
                    self.wfile.flush()
                except OSError:  # the reader gave up
                    return
                time.sleep(index.drip_s)

        def do_GET(self) -> None:
            with index.lock:
                index.requests.append(self.path)
            if index.mode == "down":
                self._send(503, "text/plain", b"down for maintenance")
            elif self.path in index.redirects:
                self.send_response(302)
                self.send_header("Location", index.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == f"/simple/{PROJECT}/":
                self._send(200, *index.page(self.headers.get("Accept", "")))
            elif self.path.startswith("/files/") and (body := index.file(self.path[7:])):
                if index.drip_s:
                    self._drip(body)
                else:
                    self._send(200, "application/octet-stream", body)
            else:
                self._send(404, "text/plain", b"not found")

    return Handler


@contextmanager
def serve_index() -> Iterator[SimpleIndex]:
    index = SimpleIndex()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    index.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
