"""How a candidate-side stage talks to the runner: JSON parameters in, one JSON document out.

Standard library only. A stage module calls ``main(fn)`` from ``if __name__ == "__main__"``;
the runner starts ``python -m runner.inside.<stage> --in PARAMS.json --out RESULT.json`` with the
runner's source on PYTHONPATH, in the candidate's environment. ``fn(params)`` returns the stage's
document as ``documents.py`` defines it (the runner refuses one with unknown or missing keys). An
exception becomes an ``ErrorDoc`` with its traceback, so the runner always gets a document unless
the process dies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

StageFn = Callable[[dict[str, Any]], Mapping[str, Any]]


def write_json_atomic(path: str, doc: Mapping[str, Any]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".result-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1, default=str)
    os.replace(tmp, path)


def run_stage(fn: StageFn, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--in", dest="params", default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    params: dict[str, Any] = {}
    if args.params:
        with open(args.params) as fh:
            params = json.load(fh)
    try:
        doc = fn(params)
    except Exception as exc:  # the candidate's failure is a result, not a crash of the runner
        doc = {
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}",
            "log_tail": traceback.format_exc()[-4000:],
        }
    write_json_atomic(args.out, doc)
    sys.stdout.flush()
    return 0


def main(fn: StageFn, argv: list[str] | None = None) -> NoReturn:
    """``run_stage``, then end the process at once: its document is on disk (written whole) and
    its output flushed, and what is left is the interpreter tearing down torch, the CuTe DSL and
    the candidate module by module, which no one reads (the probe stage of 1.32.0 on a CPU host:
    0.83 s from its document to its end, 0.03 s this way; ``bench/stage_exit.py``). The stage's
    own processes are ended before its document is written; nothing of the stage runs in an exit
    handler."""
    code = run_stage(fn, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
