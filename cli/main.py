"""``fe-ci``: serve, runner, submit, validate, configs, bisect, pin; ``fe-ci --version``.

The commands live by group: ``serve.py`` (serve, runner, submit; the wait in ``waiting.py``),
``validate.py``, ``configs.py``, ``bisection.py``, ``pin.py``; what they share is ``common.py``, the
environment each reads (the end of its help) is ``environment.py``. The
service is imported only inside ``serve``, so a runner host needs none of its dependencies. Help
is plain Click text, wrapped at a fixed width whether or not stdout is a terminal, so a piped
``--help`` is never cut short.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Annotated

import typer

from cli import bisection, configs, environment, pin, serve, validate
from cli.common import EXIT_BAD_INPUT, EXIT_FAILED

HELP = """fe-ci validates builds of NVIDIA's cuDNN frontend against its determinism contract.

\b
Exit codes (validate, and submit --wait):
  0  pass (with --require: the gate's success)
  1  fail or error (with --require: failure): a red build
  2  inconclusive or incomplete (with --require: neutral, a required check did not run)
  3  no verdict: the service could not be reached, refused the token or failed, or
     submit --wait --timeout passed first; for fe-ci runner: the service refused it (a bad
     or revoked token), or it cannot start
  4  bad input: a file that is not a wheel, an unknown stage, config or required check, a bad
     FE_CI_ setting, a wrong option or argument

Every setting is an FE_CI_ environment variable; each command's --help names those it reads.
"""
_WIDTH = 100

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=HELP,
    rich_markup_mode=None,
    context_settings={"max_content_width": _WIDTH, "terminal_width": _WIDTH},
)
for _command in (
    serve.serve,
    serve.runner,
    serve.submit,
    validate.validate,
    configs.configs,
    bisection.bisect,
    pin.pin,
):
    _name = _command.__name__
    app.command(_name, help=environment.help_text(_name, _command.__doc__))(_command)


def version() -> str:
    try:
        return metadata.version("fe-ci")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"fe-ci {version()}")
        raise typer.Exit(0)


@app.callback()
def _main(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """The options every command shares (--version)."""


def main() -> None:
    """The entry point: a wrong option or argument exits EXIT_BAD_INPUT, as bad input does, so that
    Click's usage-error status (2) is never read as the verdict ``inconclusive``/``incomplete``."""
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # Click's errors; 2 is its usage error
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        code = getattr(exc, "exit_code", EXIT_FAILED)
        code = EXIT_BAD_INPUT if code == 2 else code
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        code = EXIT_FAILED
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
