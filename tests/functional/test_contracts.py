"""The contracts other programs read, against a real service (uvicorn on 127.0.0.1): the OpenAPI
document (valid, the error shape as a schema, every 4xx a route answers, bearer security schemes
that the Swagger page's Authorize button offers) and the JUnit XML (real times, no empty file for
a build underway)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from openapi_spec_validator import validate

from testkit import loopback
from testkit.service import SUBMIT, Service
from testkit.wheels import make_wheel
from tests.helpers import register, submit_wheel

ERROR_REF = "#/components/schemas/ErrorResponse"


def operation(doc: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return dict(doc["paths"][path][method])


def test_the_openapi_document_is_valid_and_documents_errors_and_doors(service: Service) -> None:
    doc = loopback.get(f"{service.url}/openapi.json").json()
    validate(doc)  # openapi-spec-validator: raises on an invalid document
    schemas = doc["components"]["schemas"]
    assert schemas["ErrorResponse"]["required"] == ["error"]
    assert set(schemas["ErrorDetail"]["properties"]) == {"code", "message", "detail"}
    assert "HTTPValidationError" not in schemas  # this service never answers in that shape
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status.startswith("4"):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == ERROR_REF, (method, path, status)
    schemes = doc["components"]["securitySchemes"]
    assert {n: (s["type"], s["scheme"]) for n, s in schemes.items()} == {
        n: ("http", "bearer") for n in ("submit", "runner", "admin")
    }
    doors = {
        ("post", "/validate"): "submit",
        ("post", "/api/builds/{build_id}/rerun"): "submit",
        ("post", "/api/builds/{build_id}/cancel"): "submit",
        ("post", "/api/jobs/claim"): "runner",
        ("post", "/api/runners/register"): "runner",
        ("post", "/api/runners/{runner_id}/revoke"): "admin",
    }
    for (method, path), door in doors.items():
        assert operation(doc, method, path)["security"] == [{door: []}], path
    assert "security" not in operation(doc, "get", "/api/builds/{build_id}")


def test_what_the_routes_answer_to_bad_input_is_documented(
    service: Service, tmp_path: Path
) -> None:
    """Real bad requests; each answer's status is one its operation documents."""
    doc = loopback.get(f"{service.url}/openapi.json").json()
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.30.0", ""))
    runner = register(service, "ci-1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    auth = {"Authorization": f"Bearer {SUBMIT}"}
    stale = {"lease_token": "an-old-token", "result": {"name": "probe", "status": "pass"}}
    cases = [
        ("post", "/api/builds/{build_id}/rerun", "/api/builds/4242/rerun", auth, None, 404),
        ("post", "/api/builds/{build_id}/rerun", f"/api/builds/{build_id}/rerun", {}, None, 401),
        ("post", "/api/builds/{build_id}/rerun", f"/api/builds/{build_id}/rerun", auth, None, 409),
        (
            "post",
            "/api/builds/{build_id}/jobs/{job_id}/rerun",
            f"/api/builds/{build_id}/jobs/9/rerun",
            auth,
            None,
            404,
        ),
        ("get", "/api/builds/{build_id}/logs", "/api/builds/4242/logs", {}, None, 404),
        (
            "get",
            "/api/builds/{build_id}/logs",
            f"/api/builds/{build_id}/logs?stage=nope",
            {},
            None,
            422,
        ),
        ("get", "/api/builds/{build_id}/wheel", "/api/builds/4242/wheel", {}, None, 404),
        ("post", "/validate", "/validate", {**auth, "Content-Type": "text/plain"}, None, 400),
        (
            "post",
            "/api/jobs/{job_id}/stages",
            f"/api/jobs/{lease['job_id']}/stages",
            runner.headers,
            stale,
            409,
        ),
        ("post", "/api/webhooks/github", "/api/webhooks/github", {}, {}, 401),
    ]
    for method, template, url, headers, body, status in cases:
        resp = loopback.request(method, service.url + url, headers=dict(headers), json=body)
        assert resp.status_code == status, (url, resp.status_code, resp.text)
        assert set(resp.json()) == {"error"}, resp.text
        assert str(status) in operation(doc, method, template)["responses"], (template, status)


def test_the_api_page_offers_authorize_for_each_token(service: Service, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{service.url}/docs")
        page.click(".btn.authorize")
        page.wait_for_selector(".modal-ux .auth-container")
        names = page.eval_on_selector_all(
            ".modal-ux .auth-container h4", "hs => hs.map(h => h.textContent.trim())"
        )
        assert all(any(n.startswith(s) for n in names) for s in ("submit", "runner", "admin"))
        page.fill(".modal-ux .auth-container input", SUBMIT)  # the first: submit
        page.click(".modal-ux .auth-container .btn.modal-btn.auth.authorize")
        page.wait_for_selector(".modal-ux .auth-container .btn.modal-btn.auth:has-text('Logout')")
    finally:
        page.close()


def test_junit_carries_stage_times_and_a_build_underway_is_not_empty(
    service: Service, tmp_path: Path
) -> None:
    build_id = submit_wheel(service, make_wheel(tmp_path / "w", "1.30.0", ""))
    url = f"{service.url}/builds/{build_id}/junit.xml"
    queued = ET.fromstring(loopback.get(url).content)
    (suite,) = queued.findall("testsuite")
    assert suite.get("name") == "cpu/pending" and queued.get("skipped") == "1"
    assert "queued, waiting for a runner" in suite.find("testcase/skipped").get("message", "")
    runner = register(service, "ci-1")
    lease = runner.post("/api/jobs/claim", json={}).json()
    checks = [{"name": f"s.c{i}", "status": "pass"} for i in range(2)]
    result = {"name": "install", "status": "pass", "duration_s": 2.5, "checks": checks}
    body = {"lease_token": lease["lease_token"], "result": result}
    assert runner.post(f"/api/jobs/{lease['job_id']}/stages", json=body).status_code == 201
    running = ET.fromstring(loopback.get(url).content)
    install = next(s for s in running.findall("testsuite") if s.get("name") == "cpu/install")
    assert install.get("time") == "2.500"
    assert [c.get("time") for c in install.findall("testcase")] == ["1.250", "1.250"]
    assert running.get("time") == "2.500"
    assert [s.get("name") for s in running.findall("testsuite")] == ["cpu/install", "cpu/pending"]
