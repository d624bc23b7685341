"""What the ``fe-ci`` commands share: exit codes, logging, the one way to fail with a message,
the arguments several commands take, reading ``--stages``, the runner settings from the
environment, and the one check of a wheel file every command makes before it uses one."""

from __future__ import annotations

import logging
import sys
import zipfile
from pathlib import Path

import typer
from pydantic import ValidationError

from core.wire import STAGE_ORDER, Stage
from runner.config import RunnerSettings

EXIT_FAILED = 1
EXIT_NO_VERDICT = 3  # the service away, refusing or failing, or the wait's --timeout passed
EXIT_REFUSED = 3  # a runner the service refused, or one that cannot start
EXIT_BAD_INPUT = 4


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


def stage_names() -> str:
    """Every stage, in order, as ``--stages`` takes them: its help and its error say this."""
    return ", ".join(s.value for s in STAGE_ORDER)


def parse_stages(text: str | None) -> list[Stage]:
    if not text:
        return [s for s in STAGE_ORDER if s != Stage.build]
    out: list[Stage] = []
    for part in text.split(","):
        name = part.strip()
        try:
            out.append(Stage(name))
        except ValueError:
            raise fail(f"unknown stage {name!r}; stages: {stage_names()}") from None
    return out


def runner_settings() -> RunnerSettings:
    """The runner settings from the environment (``FE_CI_...``), or bad input said in words: a
    variable that does not parse names itself, as ``serve`` does for the service's."""
    try:
        return RunnerSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"FE_CI_{str(e['loc'][0]).upper() if e['loc'] else '?'}: "
            + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        )
        raise fail(f"bad configuration: {problems}") from exc


def wheel_version(path: Path) -> str:
    """The version a wheel file's METADATA names, or bad input in one message whichever command
    was given the file (``validate``, ``submit``): "no such file: X", "X is not a readable
    wheel: why"."""
    from runner.envs import envs  # the installer's module: only a command given a wheel needs it

    if not path.is_file():
        raise fail(f"no such file: {path}")
    if not path.name.endswith(".whl"):
        raise fail(f"{path} is not a readable wheel: its name does not end in .whl")
    try:
        return envs.read_wheel_metadata(path).version
    except StopIteration:
        raise fail(f"{path} is not a readable wheel: it has no .dist-info/METADATA") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise fail(f"{path} is not a readable wheel: {exc}") from exc
