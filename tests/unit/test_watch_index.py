"""The simple API as the watcher reads it (``service/watch/index.py``): which links stay on the
index, which wheel of a release fits the runners, both page forms, and a redirect off the index
refused before it is followed (against a real index on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from packaging.version import Version

from service.watch import index
from service.watch.index import IndexAway, IndexFile, Origins
from testkit.registry import registry_wheel
from tests.simple_index import PROJECT, serve_index

ORIGINS = Origins("http://127.0.0.1:8123/simple/", frozenset({"files.example"}))
SHA = "ab" * 32


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1:8123/files/x.whl", True),
        ("/files/x.whl", False),  # never resolved here: read_project resolves against the page
        ("http://127.0.0.1:8124/files/x.whl", False),  # another port is another origin
        ("https://127.0.0.1:8123/files/x.whl", False),  # another scheme too
        ("http://localhost:8123/files/x.whl", False),  # the same server by another name
        ("http://127.0.0.1:8123@evil.example/x.whl", False),  # user info hiding the host
        ("https://files.example/x.whl", True),  # FE_CI_WATCH_FILE_HOSTS
        ("http://files.example/x.whl", False),  # a file host over plain HTTP
        ("ftp://127.0.0.1:8123/x.whl", False),
        ("file:///etc/passwd", False),
    ],
)
def test_only_the_index_and_the_named_file_hosts_are_allowed(url: str, allowed: bool) -> None:
    assert ORIGINS.allows(url) is allowed


def _file(name: str, *, yanked: bool = False) -> IndexFile:
    return IndexFile(name, f"http://127.0.0.1:8123/files/{name}", SHA, yanked)


def test_each_release_gets_the_wheel_for_the_runners_python_on_manylinux_x86_64() -> None:
    tail = "manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    files = [
        _file(f"nvidia_cudnn_frontend-1.29.0-cp311-cp311-{tail}"),
        _file("nvidia_cudnn_frontend-1.29.0-cp311-cp311-manylinux_2_28_aarch64.whl"),
        _file(f"nvidia_cudnn_frontend-1.29.0-cp312-cp312-{tail}"),
        _file(f"nvidia_cudnn_frontend-1.28.0-cp311-cp311-{tail}"),
        _file("nvidia_cudnn_frontend-1.28.0-cp311-cp311-win_amd64.whl"),
        _file(f"nvidia_cudnn_frontend-1.30.0-cp311-cp311-{tail}", yanked=True),
        _file(f"nvidia_cudnn_frontend-1.31.0rc1-cp311-cp311-{tail}"),
        _file(f"nvidia_cudnn_frontend-1.31.0.dev1-cp311-cp311-{tail}"),
        _file(f"other_package-1.40.0-cp311-cp311-{tail}"),
        _file("nvidia_cudnn_frontend-1.32.0.tar.gz"),
        _file("nvidia_cudnn_frontend-not-a-wheel.whl"),
    ]
    found = index.releases(files, PROJECT, "cp311")
    assert list(found) == [Version("1.28.0"), Version("1.29.0")]  # oldest first
    assert found[Version("1.29.0")].filename == files[0].filename
    assert list(index.releases(files, PROJECT, "cp312")) == [Version("1.29.0")]


def test_the_json_page_resolves_links_and_reads_hashes_and_yanks() -> None:
    page = {
        "files": [
            {"filename": "a.whl", "url": "../../files/a.whl", "hashes": {"sha256": SHA}},
            {"filename": "b.whl", "url": "/b.whl", "hashes": {"sha256": "short"}, "yanked": "bad"},
            {"filename": 3, "url": "/c.whl"},  # not a file entry: left out
        ]
    }
    base = "http://127.0.0.1:8123/simple/p/"
    got = index.parse_json(json.dumps(page).encode(), base)
    assert got == [
        IndexFile("a.whl", "http://127.0.0.1:8123/files/a.whl", SHA, False),
        IndexFile("b.whl", "http://127.0.0.1:8123/b.whl", None, True),
    ]
    with pytest.raises(IndexAway):
        index.parse_json(b"<html>", base)


def test_the_html_page_reads_the_hash_from_each_link() -> None:
    body = (
        f'<a href="/files/a.whl#sha256={SHA}">a.whl</a>'
        '<a href="https://elsewhere.example/b.whl#md5=00" data-yanked="">b.whl</a>'
    ).encode()
    got = index.parse_html(body, "http://127.0.0.1:8123/simple/p/")
    assert got == [
        IndexFile("a.whl", "http://127.0.0.1:8123/files/a.whl", SHA, False),
        IndexFile("b.whl", "https://elsewhere.example/b.whl", None, True),
    ]


def test_a_redirect_off_the_index_is_refused_before_it_is_followed() -> None:
    wheel = registry_wheel("1.28.0")
    with serve_index() as served, httpx.Client(trust_env=False) as client:
        served.publish(wheel)
        origins = Origins(served.url, frozenset())
        page = f"/simple/{PROJECT}/"
        assert [f.filename for f in index.read_project(client, origins, PROJECT)] == [wheel.name]
        served.redirects[page] = f"http://localhost:{served.port}/moved/"
        with pytest.raises(IndexAway, match="off the index"):
            index.read_project(client, origins, PROJECT)
        assert served.seen("/moved/") == 0
        served.redirects[page] = "/simple/moved/"  # on the index: followed
        with pytest.raises(IndexAway, match="404"):
            index.read_project(client, origins, PROJECT)
        assert served.seen("/simple/moved/") == 1


def test_unset_the_index_is_the_one_pip_would_use(monkeypatch: pytest.MonkeyPatch) -> None:
    from pip._internal.models.index import PyPI

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:8123/simple/")
    assert index.default_index() == ("http://127.0.0.1:8123/simple/", frozenset())
    monkeypatch.setenv("PIP_INDEX_URL", PyPI.simple_url)  # pip's default: its file host too
    assert index.default_index() == (PyPI.simple_url, frozenset({PyPI.file_storage_domain}))


def test_an_index_that_drips_its_wheel_is_given_up_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A download must keep pace (here 0.3 s plus a MiB a second); a KiB every 0.1 s does not."""
    monkeypatch.setattr(index, "PACE_BASE_S", 0.3)
    monkeypatch.setattr(index, "PACE_MIN_RATE", 1024 * 1024)
    wheel = registry_wheel("1.28.0")
    with serve_index() as served, httpx.Client(trust_env=False) as client:
        served.publish(wheel)
        served.drip_s = 0.1
        origins = Origins(served.url, frozenset())
        (file,) = index.read_project(client, origins, PROJECT)
        with open(tmp_path / "part", "wb") as out, pytest.raises(IndexAway, match="too slowly"):
            index.download(client, origins, file, out, 64 * 1024**2)
        assert (tmp_path / "part").stat().st_size < wheel.stat().st_size
