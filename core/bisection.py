"""The bisection search, pure: which commit to test next, and what the tests so far say.

Shared by the service (a bisection of a red transition on a watched branch) and by
``fe-ci bisect`` (the same search against a local repository). No git, no I/O: the caller gives
the commits of ``git rev-list --ancestry-path --reverse GOOD..BAD`` (oldest first, ``BAD`` last,
``GOOD`` itself not included) and the verdicts it has. As in ``git bisect``: ``GOOD`` is good,
``BAD`` is bad, a commit that does not build or whose deciding check ended ``error`` is ``skip``.

The window is what can still hold the first bad commit: after the newest good commit, up to and
including the oldest bad one. The next commit is the untested, unskipped one nearest the middle
of the window's untested part; when none is left, or the cap is reached, the answer is the window:
one commit (found) or several (a range, with the skipped commits that made it one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_MAX_BUILDS = 8  # step builds one bisection may use (``FE_CI_BISECT_MAX_BUILDS``)


class Mark(StrEnum):
    good = "good"
    bad = "bad"
    skip = "skip"


@dataclass(frozen=True)
class Step:
    commit: str
    mark: Mark


class Outcome(StrEnum):
    found = "found"  # one commit: the first bad one
    range = "range"  # skipped commits left several candidates
    capped = "capped"  # the build cap came first: several candidates


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    candidates: tuple[str, ...]  # oldest first; the first bad commit is one of these
    skipped: tuple[str, ...]  # commits in the window that could not be tested

    @property
    def first_bad(self) -> str | None:
        return self.candidates[0] if self.outcome == Outcome.found else None

    def describe(self, short: int = 12) -> str:
        """One plain sentence."""
        if self.outcome == Outcome.found:
            return f"the first bad commit is {self.candidates[0][:short]}"
        names = ", ".join(c[:short] for c in self.candidates)
        why = (
            f"{len(self.skipped)} of them could not be tested (skipped)"
            if self.outcome == Outcome.range
            else "the build cap was reached before the search narrowed it to one"
        )
        return f"the first bad commit is one of {len(self.candidates)} commits ({names}): {why}"


class SearchError(ValueError):
    pass


@dataclass(frozen=True)
class Search:
    commits: tuple[str, ...]  # GOOD..BAD on the ancestry path, oldest first, BAD last
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if not self.commits:
            raise SearchError("no commits between GOOD and BAD")
        if len(set(self.commits)) != len(self.commits):
            raise SearchError("a commit appears twice in the list")
        unknown = [s.commit for s in self.steps if s.commit not in self._index]
        if unknown:
            raise SearchError(f"steps name commits outside GOOD..BAD: {unknown[:3]}")

    @property
    def _index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.commits)}

    def record(self, commit: str, mark: Mark) -> Search:
        return Search(self.commits, (*self.steps, Step(commit, mark)))

    def window(self) -> tuple[str, ...]:
        """The commits that can still be the first bad one (oldest first)."""
        index = self._index
        goods = [index[s.commit] for s in self.steps if s.mark == Mark.good]
        lo = max(goods, default=-1) + 1
        bads = [index[s.commit] for s in self.steps if s.mark == Mark.bad and index[s.commit] >= lo]
        hi = min(bads, default=len(self.commits) - 1)
        return self.commits[lo : hi + 1]

    def _tested(self) -> set[str]:
        return {s.commit for s in self.steps}

    def _skipped(self) -> set[str]:
        return {s.commit for s in self.steps if s.mark == Mark.skip}

    def next_commit(self) -> str | None:
        """The commit to test next, or None when the window cannot be narrowed further."""
        inner = self.window()[:-1]  # the window's last commit is known bad
        if not inner:
            return None
        tested = self._tested()
        middle = len(inner) // 2
        order = sorted(range(len(inner)), key=lambda i: (abs(i - middle), i))
        return next((inner[i] for i in order if inner[i] not in tested), None)

    def answer(self, *, capped: bool = False) -> Answer:
        window = self.window()
        skipped = tuple(c for c in window if c in self._skipped())
        if len(window) == 1:
            return Answer(Outcome.found, window, ())
        outcome = Outcome.capped if capped and self.next_commit() is not None else Outcome.range
        return Answer(outcome, window, skipped)

    def done(self, max_steps: int) -> Answer | None:
        """The answer when the search is over (narrowed, all skipped, or ``max_steps`` used)."""
        if self.next_commit() is None:
            return self.answer()
        if len(self.steps) >= max_steps:
            return self.answer(capped=True)
        return None


def search(commits: Sequence[str]) -> Search:
    return Search(tuple(commits))
