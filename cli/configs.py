"""``fe-ci configs [SUBJECT]``: each subject's configs, small to large, as ``--config`` names them.

The configs are the subjects' declarations in the registry (``core.subjects``, which the harness
builds its inputs from; a subject declared without them is read from its harness module, with the
host's torch); ``fe-ci validate --config`` checks its name against the same list before anything
is installed.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.common import fail
from core.subjects import SUBJECTS


def subject_configs(name: str) -> list[tuple[str, dict[str, Any]]]:
    """``[(config name, parameters)]`` of one subject, in escalation order (small to large)."""
    if SUBJECTS[name].configs:
        return [(config, dict(params)) for config, params in SUBJECTS[name].configs]
    harness = SUBJECTS[name].load()
    return [(c.name, dict(getattr(c, "params", {}))) for c in harness.configs]


def known_configs(names: list[str]) -> dict[str, list[str]] | None:
    """Config names by subject, or None where the harness cannot be read here (no torch)."""
    try:
        return {name: [c for c, _ in subject_configs(name)] for name in names}
    except ImportError:
        return None


def unknown_config(config: str, names: list[str]) -> str | None:
    """Why ``--config config`` fits none of these subjects, naming the configs each has."""
    known = known_configs(names)
    if known is None or any(config in found for found in known.values()):
        return None
    lists = "; ".join(f"{name}: {', '.join(found)}" for name, found in known.items())
    return f"unknown config {config!r} for {', '.join(names)}; configs: {lists} (fe-ci configs)"


def configs(
    subject: Annotated[
        str | None, typer.Argument(metavar="SUBJECT", show_default=False, hidden=True)
    ] = None,
) -> None:
    """List each subject's configs, small to large: the names --config takes.

    \b
    SUBJECT: one subject (default: every one).
    """
    if subject is not None and subject not in SUBJECTS:
        raise fail(f"unknown subject {subject!r}; subjects: {', '.join(SUBJECTS)}")
    for name in [subject] if subject else list(SUBJECTS):
        s = SUBJECTS[name]
        try:
            found = subject_configs(name)
        except ImportError as exc:
            raise fail(f"reading {name}'s configs needs torch here: {exc}") from exc
        typer.echo(f"{name}  (knob {s.knob}; runs on {', '.join(s.families)})")
        for config, params in found:
            shown = " ".join(f"{k}={v}" for k, v in params.items())
            typer.echo(f"  {config:<28} {shown}".rstrip())
