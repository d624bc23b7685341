"""Hostile candidates through a real ``fe-ci serve`` and a real ``fe-ci runner`` on 127.0.0.1.

Each wheel is made by the wheel factory; its ``cudnn/__init__.py`` is the attack, run by the
probe's import in the candidate's sandbox. One looks for the runner's secrets (its environment,
the service's database, the tokens file) and publishes what it found in its import error, which
the service shows to anyone; one leaves a ``setsid`` daemon behind to meddle with later builds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.isolation import jail
from runner.pipeline import pipeline, pipeline_options
from testkit import processes
from testkit.service import REGISTER, ROOT, SUBMIT, WEBHOOK, Service, service_env
from testkit.waiting import eventually
from testkit.wheels import dist_info, frontend_members, make_wheel, wheel_bytes, wheel_name
from tests.helpers import processes_with, report, submit_wheel

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.geteuid() != 0,
    reason="needs bubblewrap or root for the candidate's sandbox (CI installs bwrap, runs as root)",
)

GITHUB = "ghp_fe-ci-tests-github-token"
ADMIN = "admin-token-for-tests"
SECRETS = (SUBMIT, REGISTER, WEBHOOK, GITHUB, ADMIN)

SNOOP = """\
import json, os
seen = {{"env": sorted(os.environ), "files": {{}}}}
for path in {paths!r}:
    try:
        with open(path, "rb") as fh:
            seen["files"][path] = "read %d bytes" % len(fh.read())
    except OSError as exc:
        seen["files"][path] = type(exc).__name__
print("seen", json.dumps(seen), flush=True)
raise ImportError("seen " + json.dumps(seen) + " leaked " + {leaked!r})
"""

DAEMON = """\
import os, subprocess, sys
child = (
    "import os, sys, time\\n"
    "deadline = time.time() + 120\\n"
    "while time.time() < deadline:\\n"
    "    for root, dirs, files in os.walk({jobs!r}):\\n"
    "        try: open(os.path.join(root, 'planted'), 'w').write('x')\\n"
    "        except OSError: pass\\n"
    "    time.sleep(0.2)\\n"
)
subprocess.Popen([sys.executable, "-c", child, {token!r}], start_new_session=True)
raise ImportError("left a daemon behind")
"""


# a genuine build's import, which says so if anything was planted in its job's directory
LOOK_FOR_PLANTED = """\
import os
job = os.path.dirname(os.getcwd())
planted = [r for r, _, files in os.walk(job) if 'planted' in files]
if planted:
    raise ImportError(f"planted in {planted}")
"""


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for the module (a start is about 1.5 s of CPU), holding every secret a runner
    could leak. Each test submits its own builds, and its ``--once`` runners take exactly those:
    the queue is empty again when a test that passed ends."""
    data = tmp_path_factory.mktemp("hostile") / "data"
    env = service_env(data, FE_CI_GITHUB_TOKEN=GITHUB, FE_CI_ADMIN_TOKEN=ADMIN)
    service = Service(data_dir=data, env=env).start()
    yield service
    service.stop()


def run_once(svc: Service, name: str, **env: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [sys.executable, "-m", "cli.main", "runner", "--once"],
        env=svc.runner_env(FE_CI_RUNNER_NAME=name, **env),
        cwd=ROOT,
        text=True,
        timeout=600,
    )


def errors(r: dict[str, object]) -> list[str]:
    caps = r["capabilities"]
    assert isinstance(caps, dict)
    return [str(c["error"]) for c in caps.values() if c.get("error")]


def test_a_wheel_looking_for_secrets_finds_none_and_its_report_holds_none(
    svc: Service, tmp_path: Path
) -> None:
    tokens = svc.data_dir / "tokens.env"
    if not tokens.exists():  # the tokens file a local runner reads, as a first start writes it
        tokens.write_text(f"FE_CI_RUNNER_TOKEN={REGISTER}\n")
        tokens.chmod(0o600)
    cache = Path(svc.env["FE_CI_CACHE_DIR"])
    paths = [str(svc.data_dir / "fe-ci.sqlite3"), str(tokens), str(cache)]
    # a secret that reached the candidate some other way: the report must not show it either
    code = SNOOP.format(paths=paths, leaked=WEBHOOK)
    build = submit_wheel(svc, make_wheel(tmp_path / "wheels", "1.32.0", code))
    done = run_once(svc, "snoop-1")
    assert done.returncode == 0, done.stderr[-3000:]
    r = report(svc, build)
    assert r["status"] == "finished", r
    text = json.dumps(r)
    assert not [s for s in SECRETS if s in text], "a runner secret reached the report"
    (error, *_) = [e for e in errors(r) if "seen " in e]
    seen = json.loads(re.search(r"seen (\{.*\}) leaked", error).group(1))  # type: ignore[union-attr]
    # the allowlist: nothing of the runner's settings, secret or not, reached the candidate
    assert not [k for k in seen["env"] if k.startswith("FE_CI_") or "GITHUB" in k], seen["env"]
    assert "[redacted]" not in error.split(" leaked ")[0]  # it saw nothing that needed redacting
    assert error.endswith("leaked [redacted]")  # what it had anyway is taken out
    # the service's database and the tokens file: hidden, or not readable by the job's uid
    assert not [v for v in seen["files"].values() if v.startswith("read")], seen["files"]
    (job,) = r["jobs"]
    assert job["environment"]["sandbox"].startswith(jail.isolation())  # + a warm worker's uid
    page = svc.http(None).get(f"/builds/{build}").text
    assert not [s for s in SECRETS if s in page]


def test_a_setsid_daemon_dies_with_its_stage_and_a_later_build_is_untouched(
    svc: Service, tmp_path: Path
) -> None:
    jobs = Path(svc.env["FE_CI_CACHE_DIR"]) / "jobs"
    token = "6007.0201"  # the daemon's marker on its command line
    hostile = make_wheel(tmp_path / "hostile", "1.32.0", DAEMON.format(jobs=str(jobs), token=token))
    first = submit_wheel(svc, hostile)
    done = run_once(svc, "daemon-1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert any("left a daemon behind" in e for e in errors(report(svc, first)))
    eventually(
        lambda: processes_with(token),
        until=lambda pids: not pids,
        timeout=10,
        message="the candidate's daemon to die with its stage",
    )
    # a later, genuine build: its job directory is written by its own stages alone
    later = submit_wheel(svc, make_wheel(tmp_path / "later", "1.32.1", LOOK_FOR_PLANTED))
    done = run_once(svc, "daemon-1")
    assert done.returncode == 0, done.stderr[-3000:]
    r = report(svc, later)
    stages = {s["name"]: s for s in r["jobs"][0]["stages"]}
    assert stages["probe"]["status"] == "pass", stages["probe"]
    assert "planted" not in json.dumps(r)
    assert not jobs.exists() or not list(jobs.rglob("planted"))


def test_the_data_dir_is_the_services_alone(svc: Service) -> None:
    assert stat.S_IMODE(svc.data_dir.stat().st_mode) == 0o700
    db = svc.data_dir / "fe-ci.sqlite3"
    for path in [db, *db.parent.glob("fe-ci.sqlite3-*")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_wheels_pth_file_runs_only_in_the_sandbox(tmp_path: Path) -> None:
    """Installed, a ``.pth`` file runs in every interpreter of the environment. The runner asks
    the environment for its path after installing (to check the layer's requirements): that
    question, too, is asked in the job's sandbox, never as the runner."""
    mark = tmp_path / "ran-as"
    pth = f"import os; open({str(mark)!r}, 'a').write('%d ' % os.getuid())\n"
    members = {**frontend_members("1.32.0", ""), "zz_fe_ci_hostile.pth": pth.encode()}
    wheel = tmp_path / wheel_name("1.32.0")
    wheel.write_bytes(wheel_bytes(members, record=dist_info("1.32.0")))
    opts = pipeline_options.Options(
        stages=[Stage.install, Stage.probe],
        work_dir=tmp_path / "job",
        layers_dir=tmp_path / "layers",
        report_unselected=False,
    )
    result = pipeline.Pipeline(opts).run(wheel)
    stages = {s.name: s for s in result.stages}
    assert stages[Stage.install].status == Status.pass_, stages[Stage.install]
    assert "candidate only" in stages[Stage.install].reason  # the warm path, which asks
    assert stages[Stage.probe].status == Status.pass_, stages[Stage.probe]
    assert not mark.exists(), f"the wheel's .pth ran outside the sandbox as {mark.read_text()}"
