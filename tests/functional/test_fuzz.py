"""Property-based fuzzing of the API from its own OpenAPI schema (schemathesis), against a real
``fe-ci serve`` under uvicorn on 127.0.0.1: no answer is a 5xx, every error is in the one shape.

Each operation gets a bounded number of generated requests, sent with the token that opens its
door (so the fuzz reaches past authentication), and the service holds a build, a runner and a
leased job, so ids and tokens the generator hits can be real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from testkit import loopback
from testkit.service import ADMIN, REGISTER, SUBMIT, Service, service_env
from testkit.wheels import make_wheel

EXAMPLES = 30  # per operation (17), derandomized: the same cases every run, in about half a minute
RUNNER_OWN = ("/api/runners/resume", "/api/runners/offline")  # a runner's own token opens these


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("fuzz")
    data = root / "data"
    svc = Service(
        data_dir=data, env=service_env(data, FE_CI_LEASE_SECONDS="600", FE_CI_MAX_UPLOAD_MB="2")
    ).start()
    wheel = make_wheel(root / "w", "9.1.0", "")
    with svc.http() as http, wheel.open("rb") as fh:
        assert http.post("/validate", files={"wheel": (wheel.name, fh)}).status_code == 202
    svc.env["FUZZ_RUNNER_TOKEN"] = _register(svc)
    claim = loopback.post(
        f"{svc.url}/api/jobs/claim",
        json={},
        headers={"Authorization": f"Bearer {svc.env['FUZZ_RUNNER_TOKEN']}"},
    )
    assert claim.status_code == 200, claim.text
    yield svc
    svc.stop()
    assert "event=unhandled_error" not in svc.log_path.read_text()


def _register(svc: Service) -> str:
    """Register (again) as ``fuzz-runner``: lift a revocation the fuzz made, take the name over."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    loopback.post(f"{svc.url}/api/runners/1/reinstate", headers=admin)  # 404 before the first
    resp = loopback.post(
        f"{svc.url}/api/runners/register",
        json={"name": "fuzz-runner", "labels": {}, "replace": True},
        headers={"Authorization": f"Bearer {REGISTER}"},
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["token"])


def _token(svc: Service, path: str) -> str:
    if path.endswith(("/revoke", "/reinstate")):
        return ADMIN
    if path.startswith("/api/runners/") and path not in RUNNER_OWN:
        return REGISTER
    if path.startswith("/api/pins"):
        return ADMIN
    if path.startswith("/api/jobs/") or path in RUNNER_OWN:
        # The fuzz may revoke runner 1 (this one): lift it and register again for a new token.
        return _register(svc)
    return SUBMIT


def assert_error_shape(where: str, status: int, text: str) -> None:
    """Every 4xx is ``{"error": {"code", "message", "detail"}}`` with a string code and message."""
    try:
        body = json.loads(text)
    except ValueError:
        raise AssertionError(
            f"{where}: {status} with a body that is not JSON: {text[:300]!r}"
        ) from None
    assert isinstance(body, dict) and set(body) == {"error"}, (where, body)
    err = body["error"]
    assert isinstance(err, dict) and set(err) == {"code", "message", "detail"}, (where, body)
    assert isinstance(err["code"], str) and err["code"], (where, body)
    assert isinstance(err["message"], str) and err["message"], (where, body)


def test_no_5xx_and_every_error_in_the_one_shape(fuzzed: Service) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 12  # the fuzz covers what the schema lists
    for operation in operations:
        _fuzz(operation, fuzzed)


def _fuzz(operation: Any, svc: Service) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def one(case: Any) -> None:
        if case.path == "/api/jobs/claim" and isinstance(case.body, dict):
            # The claim is a long poll (up to 30 s): fuzz its body, not the clock.
            case.body["wait_s"] = 0
        resp = case.call(
            base_url=svc.url,
            headers={"Authorization": f"Bearer {_token(svc, case.path)}"},
            timeout=30,
        )
        where = f"{case.method} {case.formatted_path}"
        assert resp.status_code < 500, f"{where}: {resp.status_code} {resp.text[:500]}"
        if resp.status_code >= 400:
            assert_error_shape(where, resp.status_code, resp.text)

    one()


BIG = 2**63  # past SQLite's INTEGER; 2**31 is past Postgres's


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/api/builds/{BIG}"),
        ("POST", f"/api/builds/{BIG}/cancel"),
        ("GET", f"/api/builds?cursor={BIG}"),
        ("GET", f"/builds/{2**31}"),
        ("GET", f"/builds/{BIG}/junit.xml"),
        ("GET", f"/builds/{BIG}/live.json"),
        ("GET", f"/?cursor={BIG}"),
        ("POST", f"/api/jobs/{BIG}/heartbeat"),
        ("GET", f"/api/jobs/{BIG}/wheel"),
        ("POST", f"/api/runners/{BIG}/revoke"),
    ],
)
def test_an_id_past_the_column_is_refused_not_a_500(
    fuzzed: Service, method: str, path: str
) -> None:
    """Regression: an id too large for the database driver was a 500 (OverflowError)."""
    resp = loopback.request(
        method,
        f"{fuzzed.url}{path}",
        json={"lease_token": "x"},
        headers={"Authorization": f"Bearer {_token(fuzzed, path)}"},
    )
    assert resp.status_code == 422, resp.text
    assert_error_shape(path, resp.status_code, resp.text)
    assert resp.json()["error"]["code"] == "validation_error"


def test_a_json_submission_is_bounded(fuzzed: Service) -> None:
    """Regression: a JSON ``/validate`` body was read whole into memory, however large."""
    builds = fuzzed.count("builds")
    padded = json.dumps({"commit": "0" * 40, "pad": "x" * (1 << 20)})
    resp = fuzzed.http().post(
        "/validate", content=padded, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 413, resp.text
    assert_error_shape("/validate", resp.status_code, resp.text)
    assert resp.json()["error"]["code"] == "upload_too_large"
    assert fuzzed.count("builds") == builds
