"""Where the whole machine's CPU went during a test run, by kind of process: BSD process
accounting, which also sees what the per-test accounting cannot (candidates in their sandboxes,
processes that outlived the test that started them, ruff and mypy).

    touch /tmp/pacct && accton /tmp/pacct
    FE_CI_CPU_ACCOUNTING_DIR=/tmp/suite-cpu ./scripts/test -p testkit.cpu_accounting
    accton off
    .venv/bin/python bench/suite_pacct.py /tmp/pacct /tmp/suite-cpu
    .venv/bin/python bench/suite_pacct.py /tmp/pacct /tmp/suite-cpu --by-module 25

The accounting file holds one record per ended process (Linux's acct v3: pid, parent pid, name,
CPU); the pytest workers are the pids the per-test accounting named its files after
(``rows-<pid>.json``). A process's kind comes from its name and its ancestors' names.
``--by-module`` charges every process a worker started, waited for or not, to the test module
that was running on that worker when the process's outermost ancestor below the worker (or below
the worker's fork server, ``testkit/forkserver.py``) started
(accounting's start times are whole seconds: a process started in the second two modules share
goes to the later one).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import struct
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testkit.forkserver import CHILD_NAME, SERVER_NAME

_RECORD = struct.Struct("<BBHIIIIIIf8H16s")  # struct acct_v3
_HZ = os.sysconf("SC_CLK_TCK")
UV = {"uv", "uv-compile", "uv-cache-read", "tokio-rt-worker", "main2"}
BROWSER = {"node-MainThread", "ThreadPoolForeg", "HangWatcher", "SignalInspector"}


@dataclass
class Proc:
    pid: int
    ppid: int
    name: str
    cpu_s: float
    began: int  # epoch seconds


def _comp(v: int) -> int:
    """comp_t: 13-bit mantissa, 3-bit base-8 exponent."""
    return (v & 0x1FFF) << (3 * ((v >> 13) & 7))


def read(path: Path) -> list[Proc]:
    data = path.read_bytes()
    out = []
    for off in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        f = _RECORD.unpack_from(data, off)
        if f[1] != 3:
            raise SystemExit(f"{path}: not an acct v3 file (version {f[1]})")
        name = f[18].split(b"\0")[0].decode(errors="replace")
        cpu_s = (_comp(f[10]) + _comp(f[11])) / _HZ
        out.append(Proc(pid=f[6], ppid=f[7], name=name, cpu_s=cpu_s, began=f[8]))
    return out


def kind(p: Proc, ancestors: list[str], worker_child: bool) -> str:
    name = p.name.rstrip("*")
    if name.startswith("kworker") or p.ppid == 2:
        return "kernel threads"
    if name in ("mypy", "ruff"):
        return name
    if "bwrap" in ancestors or name == "bwrap":
        if name.startswith("python") and not (UV & set(ancestors)):
            return "sandboxed candidate python (stages, zygotes)"
        if name in UV or UV & set(ancestors):
            return "uv in a sandbox (layers, candidate installs)"
        return "sandboxed, other"
    if name in UV:
        return "uv outside a sandbox"
    if name.startswith("chromium") or BROWSER & {name, *ancestors} or "chromium" in ancestors:
        return "chromium / playwright"
    if name.startswith(("postgres", "initdb", "pg_ctl")) or "postgres" in ancestors:
        return "postgres"
    if name == "git" or "git" in ancestors:
        return "git"
    if name == SERVER_NAME:
        return "the tests' fork servers (testkit/forkserver.py)"
    if name == CHILD_NAME:
        return "fe-ci forked from a fork server (services, runners, CLI)"
    if name.startswith("python") and worker_child:
        return "python started by a test (services, runners, CLI)"
    if name.startswith("python") and ancestors and ancestors[0].startswith(("python", CHILD_NAME)):
        return "python started by those (runner/service subprocesses)"
    if name == "bash" or "bash" in ancestors:
        return "shell scripts (setup, quickstart, containers)"
    return "other"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pacct", type=Path)
    ap.add_argument("rows_dir", type=Path, help="the per-test accounting's dir (rows-<pid>.json)")
    ap.add_argument("--by-module", type=int, metavar="N", help="the N modules with the most CPU")
    args = ap.parse_args()
    procs = read(args.pacct)
    workers = {int(f.stem.split("-")[1]) for f in args.rows_dir.glob("rows-*.json")}
    by_pid = {p.pid: p for p in procs}
    if args.by_module:
        by_module(procs, by_pid, args.rows_dir, args.by_module)
        return
    table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for p in procs:
        names: list[str] = []
        parent = by_pid.get(p.ppid)
        while parent is not None and len(names) < 40 and parent.pid not in workers:
            names.append(parent.name.rstrip("*"))
            parent = by_pid.get(parent.ppid)
        if p.pid in workers:
            k = "pytest workers (the tests themselves)"
        else:
            k = kind(p, names, worker_child=p.ppid in workers)
        table[k][0] += 1
        table[k][1] += p.cpu_s
    total = sum(v[1] for v in table.values())
    print(f"{'kind of process':54s} {'count':>6s} {'CPU s':>7s} {'share':>6s}")
    for k, (n, cpu) in sorted(table.items(), key=lambda kv: -kv[1][1]):
        print(f"{k:54s} {n:6.0f} {cpu:7.0f} {cpu / total:6.1%}")
    print(f"{'all processes that ended':54s} {len(procs):6d} {total:7.0f}")


def by_module(procs: list[Proc], by_pid: dict[int, Proc], rows_dir: Path, top: int) -> None:
    """Each worker's descendants charged to the module running when their line began."""
    starts: dict[int, list[tuple[float, str]]] = {}
    for f in rows_dir.glob("rows-*.json"):
        rows = json.loads(f.read_text())
        if rows and "began" not in rows[0]:
            raise SystemExit(f"{f}: no start times (an older testkit.cpu_accounting)")
        starts[int(f.stem.split("-")[1])] = sorted(
            (r["began"], r["test"].split("::")[0]) for r in rows
        )
    cpu: dict[str, float] = defaultdict(float)
    kinds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for p in procs:
        line, parent = p, by_pid.get(p.ppid)
        through_server = False  # a fork server's child starts a line of its own
        while parent is not None and parent.pid not in starts:
            through_server = through_server or parent.name.rstrip("*") == SERVER_NAME
            if not through_server:
                line = parent
            parent = by_pid.get(parent.ppid)
        if parent is None or p.pid in starts:
            continue
        tests = starts[parent.pid]
        i = bisect.bisect_right(tests, (line.began + 1.0, "")) - 1
        module = tests[max(i, 0)][1]
        names: list[str] = []
        up = by_pid.get(p.ppid)
        while up is not None and up.pid not in starts and len(names) < 40:
            names.append(up.name.rstrip("*"))
            up = by_pid.get(up.ppid)
        cpu[module] += p.cpu_s
        kinds[module][kind(p, names, worker_child=p.ppid == parent.pid)] += p.cpu_s
    total = sum(cpu.values())
    print(f"processes the workers started: {total:.0f} s of CPU")
    for module, s in sorted(cpu.items(), key=lambda kv: -kv[1])[:top]:
        parts = sorted(kinds[module].items(), key=lambda kv: -kv[1])[:3]
        print(f"{s:7.1f} s  {module}")
        print("           " + "; ".join(f"{k.split(' (')[0]} {v:.0f}" for k, v in parts))


if __name__ == "__main__":
    main()
