"""A pytest plugin that says where a test run's time goes: per test, its wall time and the CPU time
of the test process and of the processes it started and waited for (services, runners, installs,
candidates), written as JSON rows, one file per process (each xdist worker writes its own).

    FE_CI_CPU_ACCOUNTING_DIR=DIR ./scripts/test -p testkit.cpu_accounting
    .venv/bin/python bench/suite_cpu.py DIR        # the table, by module

A fixture's cost is counted in the test during which it is set up or torn down (a module fixture
in its module's first or last test); a process still running when the test ends (a zygote kept
warm for later tests) is counted when it is reaped.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_rows: list[dict[str, Any]] = []


def _cpu_s() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    own, kids = _cpu_s()
    start, began = time.monotonic(), time.time()
    yield
    own_after, kids_after = _cpu_s()
    _rows.append(
        {
            "test": item.nodeid,
            "wall_s": round(time.monotonic() - start, 3),
            "began": round(began, 3),  # the epoch, to match process accounting's start times
            "cpu_self_s": round(own_after - own, 3),
            "cpu_children_s": round(kids_after - kids, 3),
        }
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    where = os.environ.get("FE_CI_CPU_ACCOUNTING_DIR")
    if not where or not _rows:
        return
    out = Path(where)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rows-{os.getpid()}.json").write_text(json.dumps(_rows))
