"""A full commit id has one pattern (``core/commits.py``): the mirrors, the service's doors and
the commands all check against it, whole-string."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import commits

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("text", "full"),
    [(SHA, True), (SHA.upper(), False), (SHA[:-1], False), (SHA + "\n", False), (SHA + "0", False)],
)
def test_a_full_commit_id_is_forty_lower_case_hex_digits_and_nothing_else(
    text: str, full: bool
) -> None:
    assert commits.is_full_sha(text) is full


def test_a_commit_with_a_trailing_newline_never_reaches_git(tmp_path: Path) -> None:
    with pytest.raises(commits.BuildFailure) as caught:
        commits.ensure_commit("file:///nowhere", SHA + "\n", tmp_path, tmp_path / "log")
    assert caught.value.kind == "unknown_commit"
    assert not any(tmp_path.iterdir())  # no mirror was started
    with pytest.raises(commits.BuildFailure) as caught:
        commits.ancestry_path(tmp_path, SHA, SHA + "\n")
    assert caught.value.kind == "unknown_commit"
