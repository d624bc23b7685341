"""One racing runner process of tests/functional/test_postgres.py's race, in a module of its own.

The race starts its runners with multiprocessing's ``spawn``: each is a fresh interpreter that
imports the module holding its target. Here that is httpx and the standard library (about 0.2 s
of CPU); the test module, with SQLAlchemy, Alembic and the service's helpers, cost each of the
eight racers 1.5 s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testkit import loopback
from testkit.service import REGISTER


def race_runner(url: str, name: str, start: Any, out: str, most: int) -> None:
    """Register, wait for the others at ``start``, then claim and run until the queue is empty
    (at most ``most`` claims): the job ids it ran, written to ``out``."""
    reg = loopback.post(
        f"{url}/api/runners/register",
        json={"name": name, "labels": {"builder": "1"}},
        headers={"Authorization": f"Bearer {REGISTER}"},
        timeout=30,
    )
    reg.raise_for_status()
    claimed: list[int] = []
    headers = {"Authorization": f"Bearer {reg.json()['token']}"}
    with loopback.client(base_url=url, headers=headers, timeout=60) as http:
        start.wait(timeout=120)
        for _ in range(most):
            resp = http.post("/api/jobs/claim", json={})
            if resp.status_code == 204:
                break
            resp.raise_for_status()
            lease = resp.json()
            claimed.append(lease["job_id"])
            token = lease["lease_token"]
            stage = {"name": "build", "status": "pass", "reason": "r"}
            http.post(
                f"/api/jobs/{lease['job_id']}/stages", json={"lease_token": token, "result": stage}
            ).raise_for_status()
            http.post(
                f"/api/jobs/{lease['job_id']}/finish", json={"lease_token": token}
            ).raise_for_status()
    Path(out).write_text(json.dumps(claimed))
