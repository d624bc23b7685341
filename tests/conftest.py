"""Shared fixtures: a real service (``fe-ci serve`` under uvicorn on 127.0.0.1) in a temp dir, a
runner cache, a browser, the upload app.

The service, its environment and the free port are ``testkit.service``'s (the benchmarks start
the same one): tests import them from there, and helpers from tests/helpers.py, never from here.
fe-ci's own processes (services, runners, CLI runs) are forked from a warm parent in each test
process (``testkit/processes.py``): the session sets ``FE_CI_TEST_FORKSERVER``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit import processes
from testkit.service import ROOT, SESSION_KERNELS, SESSION_LAYERS, Service, service_env
from tests.bisecting import runner_env
from tests.helpers import CHROMIUM, UploadServer, chromium

StartService = Callable[..., Service]


def pytest_configure(config: pytest.Config) -> None:
    """One directory of dependency layers and one compile cache for the whole session, made by
    the process that starts the workers (they inherit them): the 1.32.0 layer, about 20 s of CPU
    to build, is built once instead of once per runner a test starts, and a registry wheel's
    sm_100a kernels (about 18 s of CPU on a CPU host) are compiled once instead of once per runner
    cache or ``fe-ci validate`` run. ``FE_CI_TEST_LAYERS_DIR`` or
    ``FE_CI_TEST_COMPILE_CACHE_DIR`` set beforehand is used as it is, and kept."""
    config.add_cleanup(processes.close)
    if hasattr(config, "workerinput"):
        return
    # fe-ci's processes (services, runners, the CLI) fork from a warm parent: testkit/processes.py
    os.environ.setdefault(processes.ENABLED, "1")
    for name, prefix in ((SESSION_LAYERS, "layers"), (SESSION_KERNELS, "compile-cache")):
        if os.environ.get(name):
            continue
        made = tempfile.mkdtemp(prefix=f"fe-ci-test-{prefix}-")
        os.environ[name] = made
        config.add_cleanup(lambda name=name, made=made: _remove_shared(name, Path(made)))


def _remove_shared(name: str, path: Path) -> None:
    """Layers and published kernels are read-only (jobs only read them): give the write bits
    back to remove them."""
    os.environ.pop(name, None)
    for root, dirs, _ in os.walk(path):
        for sub in dirs:
            with contextlib.suppress(OSError):
                os.chmod(Path(root, sub), 0o700)
    shutil.rmtree(path, ignore_errors=True)


# How long each module took in the last run that ran it, in pytest's cache (.pytest_cache/).
MODULE_SECONDS = "fe-ci/module-seconds"


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first. A parallel run hands out whole modules in this order (xdist's
    own order, by number of tests, is off in pyproject.toml), so the long ones start at once and
    the short ones fill the gaps at the end, instead of one long module running alone after the
    rest are done. How long a module takes is what the last run measured (``MODULE_SECONDS``);
    where no run has (a clean clone, a new module), a module marked ``slow`` counts as longer than
    any measured one, and any other as the shortest."""
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    seconds: dict[str, float] = cache.get(MODULE_SECONDS, {}) if cache else {}
    slow = {_module(item.nodeid) for item in items if item.get_closest_marker("slow")}
    longest = max(seconds.values(), default=0.0) + 1

    def weight(item: pytest.Item) -> float:
        module = _module(item.nodeid)
        return seconds.get(module, longest if module in slow else 0.0)

    items.sort(key=lambda item: -weight(item))  # stable: a module's tests stay together


# Each module's seconds in this run: set-up, call and teardown of its tests.
_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = _module(report.nodeid)
    _spent[module] = _spent.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """What this run measured replaces the last run's figure for the modules it ran. Written by
    the process that hands out the work, which sees every worker's reports."""
    cache = getattr(session.config, "cache", None)
    if _spent and cache is not None and not hasattr(session.config, "workerinput"):
        known = cache.get(MODULE_SECONDS, {})
        rounded = {module: round(s, 1) for module, s in _spent.items()}
        cache.set(MODULE_SECONDS, {**known, **rounded})


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[StartService]:
    """``make_service(**env)`` starts a real service; all are stopped at the end of the test."""
    started: list[Service] = []

    def _make(**extra: str) -> Service:
        data = tmp_path / f"data{len(started)}"
        svc = Service(data_dir=data, env=service_env(data, **extra)).start()
        started.append(svc)
        return svc

    yield _make
    for svc in started:
        svc.stop()


@pytest.fixture
def service(make_service: StartService) -> Service:
    return make_service()


@pytest.fixture(scope="module")
def module_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for those tests of a module that depend on nothing the others did in it
    (refusals, error shapes, reads): a start costs about 1.5 s of CPU. What a test adds stays for
    the next, so such a test counts what it added (``Service.count`` before and after) rather than
    expecting an empty store."""
    data = tmp_path_factory.mktemp("module-service") / "data"
    svc = Service(data_dir=data, env=service_env(data)).start()
    yield svc
    svc.stop()


@pytest.fixture
def cache_dir() -> Iterator[str]:
    """The runners' cache (job work dirs, environments) outside ``/tmp/pytest-of-<user>``: every
    pytest session that starts on the host takes ``o+x`` off that directory again, and a
    sandboxed candidate (uid nobody) of a runner under it then cannot write its result."""
    path = tempfile.mkdtemp(prefix="fe-ci-runner-cache-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module; skipped, with the reason, where it is missing."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup does)")
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page of the module's browser (1500x900, 15 s to find anything). The pages'
    Content-Security-Policy (no 'unsafe-eval') would forbid ``wait_for_function``'s string, so it
    is bypassed here; tests/functional/test_attacks.py runs the dashboard under the policy."""
    context = browser.new_context(viewport={"width": 1500, "height": 900}, bypass_csp=True)
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()


@pytest.fixture(scope="module")
def upload_server_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UploadServer]:
    """One upload app (``tests.helpers.make_upload_app``) under uvicorn per test module."""
    with UploadServer(tmp_path_factory.mktemp("uploads") / "data") as srv:
        yield srv


@pytest.fixture
def upload_server(upload_server_running: UploadServer) -> UploadServer:
    """The module's upload app, its data dir emptied first: a test sees only its own files."""
    shutil.rmtree(upload_server_running.data_dir, ignore_errors=True)
    upload_server_running.data_dir.mkdir(parents=True)
    return upload_server_running


@pytest.fixture
def builder_runner(tmp_path: Path) -> Iterator[Any]:
    """``builder_runner(svc)`` starts a builder runner that serves until the test ends."""
    procs: list[processes.Process] = []

    def _start(svc: Service) -> None:
        with open(tmp_path / "runner.log", "ab") as log:
            procs.append(
                processes.popen(
                    [sys.executable, "-m", "cli.main", "runner"],
                    env=runner_env(svc),
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            )

    yield _start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
