"""The candidate interpreter a bench runs stages in: ``--python``, else ``--version`` of the
registry installed the runner's way (as the test suite builds it)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", default="1.32.0")
    parser.add_argument("--python", type=Path, help="an interpreter with the frontend installed")


def python(args: argparse.Namespace) -> Path:
    if args.python is not None:
        return Path(args.python)
    from testkit.registry import candidate_env  # builds it once, from the registry's wheel

    return Path(candidate_env(args.version).python)
