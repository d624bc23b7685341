"""A package index's simple API, read as hostile input: a project's page (PEP 691 JSON, else PEP
503 HTML), the release wheel that fits the runners, and that wheel downloaded under a size bound
with its sha256 checked against the page's.

No link leaves the index: a file (or a redirect) whose scheme and host are not the index's own,
or one of ``FE_CI_WATCH_FILE_HOSTS``, is refused and never requested. Where the index is pip's
default one, pip's own file storage host is allowed beside it (pip names both).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import IO
from urllib.parse import urljoin, urlsplit

import httpx
from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

log = logging.getLogger("fe_ci.watch")

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
MAX_PAGE_BYTES = 8 * 1024**2  # the frontend's page lists ~300 files in ~150 KB
MAX_FILES = 20_000
MAX_REDIRECTS = 3
TIMEOUT_S = 30.0  # to connect, and between two reads
# A response must keep pace: N bytes within PACE_BASE_S + N / PACE_MIN_RATE seconds of its start,
# so an index that drips a byte at a time cannot hold the watcher (the 1.32.0 wheel, 11.6 MB,
# gets 60 s + 177 s, as an upload of it does).
PACE_BASE_S = 60.0
PACE_MIN_RATE = 64 * 1024  # bytes a second


class IndexAway(Exception):
    """The index could not be read now (unreachable, an error status, a page too large or not
    one): the watcher backs off and tries again."""


class BadRelease(Exception):
    """A release's wheel that will not do (its hash or size, or the wheel's checks): refused for
    good."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    yanked: bool


@dataclass(frozen=True)
class Origins:
    """Where the watcher may go: the index's own scheme and host (``host:port``), and the extra
    hosts files may come from."""

    index: str
    file_hosts: frozenset[str]

    def allows(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or "@" in parts.netloc:
            return False
        index = urlsplit(self.index)
        if (parts.scheme, parts.netloc.lower()) == (index.scheme, index.netloc.lower()):
            return True
        return parts.scheme == "https" and parts.netloc.lower() in self.file_hosts


def default_index() -> tuple[str, frozenset[str]]:
    """The index pip would use (``PIP_INDEX_URL``, pip's configuration, else pip's default) and the
    file host pip names for its default one."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError as exc:
        raise RuntimeError(
            "FE_CI_WATCH_INDEX is unset and pip, which names the default index, is not "
            "installed: set FE_CI_WATCH_INDEX to the simple index's URL"
        ) from exc

    url = os.environ.get("PIP_INDEX_URL") or _pip_config_index() or PyPI.simple_url
    same = url.rstrip("/") == PyPI.simple_url.rstrip("/")
    return url, frozenset({PyPI.file_storage_domain} if same else ())


def _pip_config_index() -> str | None:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = out.stdout.strip()
    return value if out.returncode == 0 and value.startswith(("http://", "https://")) else None


def project_url(index: str, package: str) -> str:
    return urljoin(index.rstrip("/") + "/", f"{canonicalize_name(package)}/")


def _get(client: httpx.Client, url: str, origins: Origins, **headers: str) -> httpx.Response:
    """A streamed GET that follows at most MAX_REDIRECTS redirects, each within the origins."""
    for _ in range(MAX_REDIRECTS + 1):
        if not origins.allows(url):
            log.warning("event=watch_link_refused url=%s index=%s", url, origins.index)
            raise BadRelease(f"refused a link off the index: {url}")
        request = client.build_request("GET", url, headers=headers)
        try:
            response = client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise IndexAway(f"{type(exc).__name__}: {exc}") from exc
        if response.is_redirect and "location" in response.headers:
            response.close()
            url = urljoin(url, response.headers["location"])
            continue
        if response.status_code != 200:
            response.close()
            raise IndexAway(f"{url} answered {response.status_code}")
        return response
    raise IndexAway(f"more than {MAX_REDIRECTS} redirects from {url}")


def _read_bounded(response: httpx.Response, limit: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise IndexAway(f"the page declares {declared} bytes; the limit is {limit}")
    body = bytearray()
    try:
        for chunk in _chunks(response):
            body.extend(chunk)
            if len(body) > limit:
                raise IndexAway(f"the page is larger than {limit} bytes")
    finally:
        response.close()
    return bytes(body)


def read_project(client: httpx.Client, origins: Origins, package: str) -> list[IndexFile]:
    """The files the index lists for ``package``; links off the origins are left out (logged)."""
    url = project_url(origins.index, package)
    try:
        response = _get(client, url, origins, Accept=ACCEPT)
    except BadRelease as exc:
        raise IndexAway(str(exc)) from exc
    final = str(response.url)
    ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
    body = _read_bounded(response, MAX_PAGE_BYTES)
    if ctype == JSON_TYPE:
        files = parse_json(body, final)
    elif ctype in HTML_TYPES:
        files = parse_html(body, final)
    else:
        raise IndexAway(f"{url} answered {ctype or 'no content type'}, not a simple API page")
    kept = []
    for f in files:
        if origins.allows(f.url):
            kept.append(f)
        else:
            log.warning("event=watch_link_refused url=%s index=%s", f.url, origins.index)
    return kept


def parse_json(body: bytes, base: str) -> list[IndexFile]:
    """A PEP 691 project page's files, URLs resolved against ``base``."""
    try:
        page = json.loads(body)
    except ValueError as exc:
        raise IndexAway(f"the JSON page is not valid JSON: {exc}") from exc
    files = page.get("files") if isinstance(page, dict) else None
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise IndexAway("the JSON page has no list of files (or too many)")
    out = []
    for entry in files:
        if not isinstance(entry, dict):
            continue
        name, url, hashes = entry.get("filename"), entry.get("url"), entry.get("hashes")
        if not isinstance(name, str) or not isinstance(url, str):
            continue
        sha = hashes.get("sha256") if isinstance(hashes, dict) else None
        yanked = entry.get("yanked", False)
        out.append(IndexFile(name, urljoin(base, url), _hex(sha), yanked not in (False, None)))
    return out


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[dict[str, str | None], list[str]]] = []
        self._open: tuple[dict[str, str | None], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and len(self.found) < MAX_FILES:
            self._open = (dict(attrs), [])
            self.found.append(self._open)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._open = None


def parse_html(body: bytes, base: str) -> list[IndexFile]:
    """A PEP 503 project page's files: each anchor's text is the file name, its href the URL,
    with the sha256 in the fragment (``#sha256=<hex>``)."""
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    parser.close()
    out = []
    for attrs, text in parser.found:
        href = attrs.get("href")
        if not href:
            continue
        url = urljoin(base, href)
        parts = urlsplit(url)
        algo, _, digest = parts.fragment.partition("=")
        name = "".join(text).strip() or parts.path.rsplit("/", 1)[-1]
        yanked = "data-yanked" in attrs
        sha = _hex(digest) if algo == "sha256" else None
        out.append(IndexFile(name, url.split("#", 1)[0], sha, yanked))
    return out


def _hex(value: object) -> str | None:
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value
    return None


def fits(tags: frozenset[Tag], python: str) -> bool:
    """A wheel for CPython ``python`` (its own ABI or the stable one) on manylinux x86_64."""
    return any(
        t.interpreter == python
        and t.abi in (python, "abi3")
        and t.platform.startswith("manylinux")
        and t.platform.endswith("_x86_64")
        for t in tags
    )


def releases(files: list[IndexFile], package: str, python: str) -> dict[Version, IndexFile]:
    """Per final release of ``package``, oldest first, the wheel that fits; yanked files, pre- and
    development releases, and releases with no fitting wheel are left out."""
    found: dict[Version, IndexFile] = {}
    want = canonicalize_name(package)
    for f in files:
        if f.yanked or not f.filename.endswith(".whl"):
            continue
        try:
            name, version, _build, tags = parse_wheel_filename(f.filename)
        except InvalidWheelFilename:
            continue
        if name != want or version.is_prerelease or version.is_devrelease:
            continue
        if fits(tags, python) and version not in found:
            found[version] = f
    return dict(sorted(found.items()))


def download(
    client: httpx.Client, origins: Origins, file: IndexFile, out: IO[bytes], max_bytes: int
) -> tuple[str, int]:
    """Stream ``file`` into ``out`` under ``max_bytes``; its (sha256, size), the sha256 checked
    against the index's."""
    if file.sha256 is None:
        raise BadRelease(f"the index gives no sha256 for {file.filename}")
    response = _get(client, file.url, origins)
    digest, size = hashlib.sha256(), 0
    try:
        for chunk in _chunks(response):
            size += len(chunk)
            if size > max_bytes:
                raise BadRelease(f"{file.filename} is larger than {max_bytes} bytes")
            digest.update(chunk)
            out.write(chunk)
    finally:
        response.close()
    got = digest.hexdigest()
    if not hmac.compare_digest(got, file.sha256):
        raise BadRelease(f"{file.filename}: sha256 {got} is not the index's {file.sha256}")
    return got, size


def _chunks(response: httpx.Response) -> Iterator[bytes]:
    """The body's chunks, as long as they keep pace (``PACE_BASE_S``, ``PACE_MIN_RATE``)."""
    start, got = time.monotonic(), 0
    try:
        for chunk in response.iter_bytes():  # as they arrive: the pace is checked on each
            got += len(chunk)
            if time.monotonic() - start > PACE_BASE_S + got / PACE_MIN_RATE:
                raise IndexAway(f"{response.url} sends too slowly ({got} bytes so far)")
            yield chunk
    except httpx.HTTPError as exc:
        raise IndexAway(f"{type(exc).__name__}: {exc}") from exc
