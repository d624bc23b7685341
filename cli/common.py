"""What the ``fe-ci`` commands share: exit codes, logging, the one way to fail with a message,
the arguments several commands take, and reading ``--stages``."""

from __future__ import annotations

import logging
import sys

import typer

from core.wire import STAGE_ORDER, Stage

EXIT_REFUSED = 3
EXIT_BAD_INPUT = 4
EXIT_FAILED = 1


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        stream=sys.stderr,
    )


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


# The argument is named in each command's text: Typer would print it with a "<path>" label.
WHEEL_ARG = typer.Argument(metavar="WHEEL", show_default=False, hidden=True)
LOG_LEVEL = typer.Option(metavar="LEVEL", help="debug, info, warning or error (logs go to stderr)")


def parse_stages(text: str | None) -> list[Stage]:
    if not text:
        return [s for s in STAGE_ORDER if s != Stage.build]
    out: list[Stage] = []
    for part in text.split(","):
        name = part.strip()
        try:
            out.append(Stage(name))
        except ValueError:
            known = ", ".join(s.value for s in Stage)
            raise fail(f"unknown stage {name!r}; stages: {known}") from None
    return out
