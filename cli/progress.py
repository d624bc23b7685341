"""Progress on long work, on stderr: a live line with a spinner and the seconds so far on a
terminal (rich), plain lines otherwise (a log, a CI job, a pipe), so nothing is lost either way.

``StageProgress`` is the pipeline's reporter for ``fe-ci validate`` (install, probe, the
determinism stage's compiles and runs, refusal); ``Waiting`` follows a submitted build for
``fe-ci submit --wait``.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from core.wire import Stage, StageResult, Status

_MARK = {
    Status.pass_: "ok ",
    Status.fail: "FAIL",
    Status.inconclusive: "??? ",
    Status.error: "ERR ",
    Status.timeout: "TIME",
    Status.crashed: "CRSH",
    Status.skipped: "skip",
    Status.not_applicable: "n/a ",
}
_STYLE = {
    Status.pass_: "green",
    Status.fail: "red",
    Status.error: "red",
    Status.timeout: "red",
    Status.crashed: "red",
    Status.inconclusive: "yellow",
}
# What each stage is busy with, for the live line.
DOING = {
    Stage.build: "building the wheel",
    Stage.install: "installing the candidate and its dependencies",
    Stage.probe: "probing the build's entry points and knobs",
    Stage.determinism: "determinism: compiling kernels, then running both arms",
    Stage.numerics: "numerics against the float32 reference",
    Stage.refusal: "refusal: driving the reference consumer",
}


def console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


class _Live:
    """One spinner line with elapsed time on a terminal; nothing otherwise."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.live = out.is_terminal
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def show(self, text: str) -> None:
        if not self.live:
            return
        if self.bar is None:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.out,
                transient=True,
            )
            self.bar.start()
        if self.task is None:
            self.task = self.bar.add_task(text, total=None)
        else:
            self.bar.update(self.task, description=text)

    def restart(self, text: str) -> None:
        """A new piece of work: the clock starts again."""
        self.clear()
        self.show(text)

    def clear(self) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.remove_task(self.task)
        self.task = None

    def stop(self) -> None:
        self.clear()
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class StageProgress:
    """The pipeline's reporter: what runs now, and one line per stage when it ends."""

    def __init__(self, out: Console | None = None) -> None:
        self.out = out or console()
        self.line = _Live(self.out)
        self.t0 = time.monotonic()

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.line.stop()

    def started(self, stage: Stage) -> None:
        self.t0 = time.monotonic()
        if self.line.live:
            self.line.restart(DOING.get(stage, stage.value))
        else:
            self.out.print(f"  ... {stage.value:<12} running: {DOING.get(stage, '')}")

    def finished(self, result: StageResult) -> None:
        self.line.clear()
        mark = _MARK.get(result.status, "?")
        took = f"{time.monotonic() - self.t0:5.1f} s"
        line = f"  [{mark}] {result.name.value:<12} {result.status.value:<15} {took}  "
        text = Text(line + result.reason[:160], style=_STYLE.get(result.status, ""))
        self.out.print(text)


class Waiting:
    """``submit --wait``: the build's state as it changes (a live line, or a line per change)."""

    def __init__(self, out: Console | None = None) -> None:
        self.out = out or console()
        self.line = _Live(self.out)
        self.said = ""

    def __enter__(self) -> Waiting:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.line.stop()

    def update(self, text: str) -> None:
        if text == self.said:
            return
        self.said = text
        if self.line.live:
            self.line.restart(text)
        else:
            self.out.print(text)
