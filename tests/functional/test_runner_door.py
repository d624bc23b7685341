"""Malformed runner posts against a real ``fe-ci serve`` on 127.0.0.1: each is refused with a 4xx
in the one error shape, and nothing of it is stored (no row; the job still leased as it was).

Regressions of an attack on the runner protocol: a NaN ``duration_s`` was a 500; NaN, inf, 1e308,
negative run counts and 1 MB strings were stored; any config name was remembered and sent in the
next lease (a 300-character one made ``finish`` a 500 with the job left leased). The models'
bounds themselves are ``tests/unit/test_wire_bounds.py``; bodies past the size limit are
``tests/functional/test_attacks.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from core.subjects import SUBJECTS
from testkit.service import Service, service_env
from tests.helpers import register, submit_wheel

SDPA = SUBJECTS["sdpa_bwd"].config_names
TABLES = (
    "stages",
    "checks",
    "findings",
    "capabilities",
    "drift",
    "chosen_configs",
    "determinism_records",
)


class Leased:
    """A service with one build whose sm_90 job is leased to a registered runner."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.build_id = submit_wheel(svc)
        self.runner = register(svc, "h200", arch="sm_90", gpu="NVIDIA H200")
        lease = self.runner.post("/api/jobs/claim", json={}).json()
        assert lease["kind"] == "gpu", lease
        self.job_id, self.token = lease["job_id"], lease["lease_token"]

    def job(self) -> tuple[str, str, int]:
        with self.svc.db() as conn:
            row = conn.execute(
                "SELECT state, lease_expires_at, attempt FROM jobs WHERE id = ?", (self.job_id,)
            ).fetchone()
        return tuple(row)  # type: ignore[return-value]

    def stored(self) -> dict[str, int]:
        return {table: self.svc.count(table) for table in TABLES}

    def post(self, route: str, body: dict[str, Any] | str) -> httpx.Response:
        text = body if isinstance(body, str) else json.dumps(body)
        return self.runner.post(
            f"/api/jobs/{self.job_id}/{route}",
            content=text.encode("utf-8", "surrogatepass"),
            headers={"Content-Type": "application/json"},
        )


@pytest.fixture(scope="module")
def leased(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leased]:
    data = tmp_path_factory.mktemp("door") / "data"
    svc = Service(data_dir=data, env=service_env(data, FE_CI_GPU_ARCHS="sm_90")).start()
    yield Leased(svc)
    svc.stop()
    assert "event=unhandled_error" not in svc.log_path.read_text()


def stage(**result: Any) -> dict[str, Any]:
    return {"name": "determinism", "status": "pass", **result}


def det_check(**metrics: Any) -> dict[str, Any]:
    return {"name": "sdpa_bwd.deterministic", "status": "pass", "metrics": metrics}


def drift_row(**over: Any) -> dict[str, Any]:
    row = {"subject": "sdpa_bwd", "output": "dq", "arm": "control", "runs": 8, "differing": 3}
    return {**row, "distinct": 4, "max_abs_diff": 1e-3, "finite": True, **over}


def raw(result: str) -> str:
    """A stage post whose result is JSON text as given (NaN, 1e999: what json.dumps won't write)."""
    return f'{{"lease_token": "TOKEN", "result": {result}}}'


MALFORMED_STAGES: dict[str, dict[str, Any] | str] = {
    "nan duration": raw('{"name": "determinism", "status": "pass", "duration_s": NaN}'),
    "inf duration": raw('{"name": "determinism", "status": "pass", "duration_s": Infinity}'),
    "1e308 as inf": raw(
        '{"name": "determinism", "status": "pass", "drift": [{"subject": "sdpa_bwd", '
        '"output": "dq", "arm": "control", "runs": 8, "differing": 1, "distinct": 2, '
        '"max_abs_diff": 1e999, "finite": true}]}'
    ),
    "nan in metrics": raw(
        '{"name": "determinism", "status": "pass", "checks": [{"name": "sdpa_bwd.deterministic",'
        ' "status": "pass", "metrics": {"luck": NaN}}]}'
    ),
    "negative runs": stage(drift=[drift_row(runs=-5)]),
    "a megabyte reason": stage(reason="r" * (1 << 20)),
    "a megabyte detail": stage(checks=[{**det_check(), "detail": "d" * (1 << 20)}]),
    "a made-up config": stage(checks=[det_check(config={"name": "x" * 300}, config_name="x")]),
    "a config of another subject": stage(drift=[drift_row(config={"name": "e4_t256_n512_k1024"})]),
    "an unknown subject's config": stage(
        checks=[{"name": "evil.deterministic", "status": "pass", "metrics": {"config_name": "a"}}]
    ),
    "not json": raw("{"),
}


@pytest.mark.parametrize("what", list(MALFORMED_STAGES))
def test_a_malformed_stage_post_is_refused_and_stores_nothing(leased: Leased, what: str) -> None:
    body = MALFORMED_STAGES[what]
    if isinstance(body, dict):
        body = {"lease_token": leased.token, "result": body}
    else:
        body = body.replace("TOKEN", leased.token)
    before, job = leased.stored(), leased.job()
    resp = leased.post("stages", body)
    assert 400 <= resp.status_code < 500, (what, resp.status_code, resp.text[:500])
    error = resp.json()["error"]
    assert set(error) == {"code", "message", "detail"} and error["code"] and error["message"]
    assert len(resp.content) < 20_000  # the refusal does not echo the megabyte back
    if "config" in what:  # named as the subject's configs, as the pins' check names them
        assert resp.status_code == 422 and error["code"] == "unknown_config", error
    assert leased.stored() == before and leased.job() == job


@pytest.mark.parametrize(
    "body",
    [
        {"environment": {"gpu": "NVIDIA " + "H" * 300}},
        {"error": "e" * (1 << 20)},
        {"environment": {"python": 3.11, "sandbox": {"a": 1}}},
    ],
    ids=["a 300-character gpu", "a megabyte error", "wrong types"],
)
def test_a_malformed_finish_leaves_the_job_leased_as_it_was(
    leased: Leased, body: dict[str, Any]
) -> None:
    before, job = leased.stored(), leased.job()
    resp = leased.post("finish", {"lease_token": leased.token, **body})
    assert resp.status_code == 422, resp.text[:500]
    assert resp.json()["error"]["code"] == "validation_error"
    assert leased.job() == job and job[0] == "leased"
    assert leased.stored() == before


def test_an_honest_post_after_the_refusals_is_stored_and_its_config_remembered(
    leased: Leased,
) -> None:
    """The door lets through what a runner really sends: the refused posts above left the job
    able to finish, and a declared config comes back in the next lease of the family."""
    check = det_check(config={"name": SDPA[1]}, config_name=SDPA[1], control={"varying": 5})
    body = {"lease_token": leased.token, "result": stage(checks=[check], duration_s=3.5)}
    assert leased.post("stages", body).status_code == 201
    finish = {"lease_token": leased.token, "environment": {"gpu": "NVIDIA H200"}}
    assert leased.post("finish", finish).status_code == 200
    with leased.svc.db() as conn:
        remembered = conn.execute("SELECT subject, config FROM chosen_configs").fetchall()
    assert remembered == [("sdpa_bwd", SDPA[1])]
    submit_wheel(leased.svc)
    lease = leased.runner.post("/api/jobs/claim", json={}).json()
    assert [(c["subject"], c["config"]) for c in lease["start_configs"]] == remembered
