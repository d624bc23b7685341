"""The release watcher against a real index on 127.0.0.1 (``tests/simple_index.py``) that lists
real registry wheels: a new release becomes one build on the line of releases, a restart submits
nothing twice, an index that is away is backed off from and nothing is built, and a link off the
index's host is never followed."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.registry import registry_wheel
from testkit.service import Service, free_port
from testkit.waiting import eventually
from tests.helpers import logged, register
from tests.simple_index import SimpleIndex, serve_index

StartService = Callable[..., Service]


@pytest.fixture
def index() -> Iterator[SimpleIndex]:
    with serve_index() as served:
        yield served


def watching(index: SimpleIndex, **extra: str) -> dict[str, str]:
    return {
        "FE_CI_WATCH": "1",
        "FE_CI_WATCH_INDEX": index.url,
        "FE_CI_WATCH_INTERVAL_S": "0.2",
        **extra,
    }


def rows(svc: Service, sql: str) -> list[tuple[Any, ...]]:
    with svc.db() as conn:
        return list(conn.execute(sql).fetchall())


def release_builds(svc: Service) -> list[tuple[Any, ...]]:
    return rows(
        svc, "SELECT version, branch, sha256, submitted_by FROM builds WHERE source = 'release'"
    )


def polls_more(index: SimpleIndex, n: int) -> None:
    """Until the index has answered ``n`` more page requests than now."""
    target = index.page_polls() + n
    eventually(lambda: index.page_polls() >= target, timeout=30, message=f"{n} more polls")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("mode", ["json", "html"])
def test_a_new_release_becomes_one_build_on_the_line_of_releases(
    make_service: StartService, index: SimpleIndex, mode: str
) -> None:
    """At the first poll the newest release is validated and the older one only recorded; a
    release published later becomes one more build, whichever form the index's page takes."""
    index.mode = mode  # type: ignore[assignment]
    old, new, newer = (registry_wheel(v) for v in ("1.27.0", "1.28.0", "1.29.0"))
    index.publish(old)
    index.publish(new)
    svc = make_service(**watching(index))
    eventually(lambda: len(release_builds(svc)) == 1, timeout=60, message="the first build")
    assert release_builds(svc) == [("1.28.0", "releases", sha(new), "watcher")]
    index.publish(newer)
    eventually(lambda: len(release_builds(svc)) == 2, timeout=60, message="the second build")
    polls_more(index, 3)
    assert [b[0] for b in release_builds(svc)] == ["1.28.0", "1.29.0"]
    states = rows(svc, "SELECT version, state FROM watched_releases ORDER BY version")
    assert states == [("1.27.0", "seen"), ("1.28.0", "submitted"), ("1.29.0", "submitted")]
    assert index.seen(f"/files/{old.name}") == 0  # recorded, never downloaded
    with svc.http() as http:
        listed = http.get("/api/builds", params={"source": "release"}).json()
    assert [b["version"] for b in listed["items"]] == ["1.29.0", "1.28.0"]


def test_a_restart_submits_no_release_twice(make_service: StartService, index: SimpleIndex) -> None:
    wheel = registry_wheel("1.28.0")
    index.publish(wheel)
    svc = make_service(**watching(index))
    eventually(lambda: len(release_builds(svc)) == 1, timeout=60, message="the build")
    downloads = index.seen("/files/")
    svc.stop()
    again = Service(data_dir=svc.data_dir, env=svc.env).start()
    try:
        polls_more(index, 5)
        assert len(release_builds(again)) == 1
        assert index.seen("/files/") == downloads  # not even fetched again
    finally:
        again.stop()


def test_an_index_that_is_away_is_backed_off_from_and_nothing_is_built(
    make_service: StartService, index: SimpleIndex
) -> None:
    index.publish(registry_wheel("1.28.0"))
    index.mode = "down"
    svc = make_service(**watching(index, FE_CI_WATCH_MAX_BACKOFF_S="1.6"))
    eventually(logged(svc.log_path, "retry_in_s=1.6"), timeout=30)
    waits = [float(w) for w in re.findall(r"retry_in_s=([\d.]+)", svc.log_path.read_text())]
    assert waits[:4] == [0.4, 0.8, 1.6, 1.6][: len(waits[:4])]  # doubling from the interval, capped
    assert max(waits) == 1.6
    assert release_builds(svc) == []
    index.mode = "json"  # back: the next poll takes the release
    eventually(lambda: len(release_builds(svc)) == 1, timeout=60, message="the build after")


def test_a_link_off_the_index_host_is_never_followed(
    make_service: StartService, index: SimpleIndex
) -> None:
    """The page lists the wheel at another host name of the same server (``localhost``): were the
    link followed, the download would succeed. A wheel whose bytes are not the page's sha256 is
    refused for good."""
    off, bad = registry_wheel("1.28.0"), registry_wheel("1.29.0")
    index.publish(off, url=f"http://localhost:{index.port}/files/{off.name}")
    index.publish(bad, sha256="0" * 64)
    svc = make_service(**watching(index))
    eventually(logged(svc.log_path, "event=watch_link_refused"), timeout=30)
    eventually(
        lambda: rows(svc, "SELECT state, reason FROM watched_releases"),
        until=lambda found: found and found[0][0] == "refused",
        timeout=60,
        message="the wheel with the wrong hash refused",
    )
    polls_more(index, 3)
    assert release_builds(svc) == []
    assert index.seen(f"/files/{off.name}") == 0
    ((state, reason),) = rows(svc, "SELECT state, reason FROM watched_releases")
    assert state == "refused" and "is not the index's" in reason


def _run_cpu_job(runner: httpx.Client, build_id: int, *, red: bool) -> None:
    """Take the build's CPU job and post its stages, failing the probe where ``red`` (a scripted
    runner: the line's colour is what this tests, not the stages)."""
    lease = runner.post("/api/jobs/claim", json={"wait_s": 10}).json()
    assert lease["build_id"] == build_id and lease["kind"] == "cpu", lease
    for name in lease["stages"]:
        status = "fail" if red and name == "probe" else "pass"
        result = {"name": name, "status": status, "checks": [{"name": name, "status": status}]}
        body = {"lease_token": lease["lease_token"], "result": result}
        assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    done = {"lease_token": lease["lease_token"]}
    assert runner.post(f"/api/jobs/{lease['job_id']}/finish", json=done).status_code == 200


def test_the_line_of_releases_turning_red_is_notified(
    make_service: StartService, index: SimpleIndex
) -> None:
    """As develop's: the second release fails where the first passed, and the outbox holds the
    line's notification, the first release named as the previous build."""
    index.publish(registry_wheel("1.28.0"))
    nowhere = f"http://127.0.0.1:{free_port()}/hook"  # delivery is test_notifications.py's
    svc = make_service(**watching(index, FE_CI_NOTIFY_URL=nowhere))
    runner = register(svc, "cpu-runner")
    eventually(lambda: len(release_builds(svc)) == 1, timeout=60, message="the first build")
    ((first,),) = rows(svc, "SELECT id FROM builds WHERE source = 'release'")
    _run_cpu_job(runner, first, red=False)
    index.publish(registry_wheel("1.29.0"))
    eventually(lambda: len(release_builds(svc)) == 2, timeout=60, message="the second build")
    ((second,),) = rows(svc, f"SELECT id FROM builds WHERE source = 'release' AND id > {first}")
    _run_cpu_job(runner, second, red=True)
    found = eventually(
        lambda: rows(svc, "SELECT build_id, event, body FROM notifications"),
        timeout=30,
        message="the line's notification",
    )
    ((build_id, event, body),) = found
    sent = json.loads(body)
    assert (build_id, event) == (second, "branch_red")
    assert sent["branch"] == "releases" and sent["previous"]["id"] == first
    assert "releases turned red" in sent["text"]
    with svc.http(None) as http:  # the line's badge, as a branch's
        assert "fe-ci: fail" in http.get("/badge/releases.svg").text
