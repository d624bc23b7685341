"""A child for tests/functional/test_forkserver.py: ``python -m tests.forkchild MODE [ARG]``.

``report``: prints what it was given (argv, working directory, an environment variable, the head
of ``sys.path``, stdin, its parent's pid) as one JSON line, a line on stderr, and exits with ARG.
``wait``: prints its pid and sleeps until signalled. ``leave``: starts a thread that writes ARG
(a path) after a moment and registers an ``atexit`` handler that appends to it, then returns at
once.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from pathlib import Path


def main() -> None:
    mode, arg = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    if mode == "report":
        print(json.dumps({
            "argv": sys.argv[1:],
            "cwd": os.getcwd(),
            "x": os.environ.get("FORKCHILD_X"),
            "path0": sys.path[0],
            "path1": sys.path[1],
            "stdin": sys.stdin.read(),
            "main": __name__,
            "parent": os.getppid(),
        }))  # fmt: skip
        print("to stderr", file=sys.stderr)
        raise SystemExit(int(arg or 0))
    if mode == "wait":
        print(os.getpid(), flush=True)
        time.sleep(600)
    if mode == "leave":
        path = Path(arg)
        threading.Thread(target=lambda: (time.sleep(0.5), path.write_text("thread\n"))).start()
        atexit.register(lambda: path.open("a").write("atexit\n"))


if __name__ == "__main__":
    main()
