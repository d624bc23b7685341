"""The API's build list and the grid select builds by one filter: same builds, same order."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.db import make_engine
from testkit import loopback
from testkit.dashboard_data import seed_all
from testkit.service import Service, service_env

FILTERS = [
    {},
    {"verdict": "fail"},
    {"source": "commit"},
    {"source": "commit", "branch": "refs/heads/develop"},
    {"source": "wheel", "verdict": "pass"},
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data: Path = tmp_path_factory.mktemp("list") / "data"
    svc = Service(data_dir=data, env=service_env(data)).start()
    engine = make_engine(f"sqlite:///{data / 'fe-ci.sqlite3'}")
    try:
        seed_all(engine, history=2)
    finally:
        engine.dispose()
    yield svc
    svc.stop()


def _api(svc: Service, params: dict[str, str]) -> list[int]:
    ids: list[int] = []
    cursor = None
    while True:
        query = {**params, "limit": "7", **({"cursor": str(cursor)} if cursor else {})}
        page = loopback.get(f"{svc.url}/api/builds", params=query, timeout=30).json()
        ids += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def _grid(svc: Service, params: dict[str, str]) -> list[int]:
    ids: list[int] = []
    url = f"{svc.url}/"
    query: dict[str, str] | None = {**params, "limit": "7"}
    while True:
        html = loopback.get(url, params=query, timeout=30).text
        ids += [int(i) for i in re.findall(r'<tr id="build-(\d+)"', html)]
        older = re.search(r'<a rel="next" href="([^"]+)"', html)
        if older is None:
            return ids
        url, query = f"{svc.url}{older.group(1).replace('&amp;', '&')}", None


@pytest.mark.parametrize(
    "params", FILTERS, ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()) or "all"
)
def test_the_api_and_the_grid_list_the_same_builds(seeded: Service, params: dict[str, str]) -> None:
    api = _api(seeded, params)
    assert api and api == sorted(api, reverse=True)
    assert _grid(seeded, params) == api
