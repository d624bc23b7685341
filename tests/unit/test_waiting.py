"""``testkit.waiting.eventually``: the one wait the tests use."""

from __future__ import annotations

import itertools

import pytest

from testkit.waiting import eventually


def test_the_first_truthy_result_is_returned() -> None:
    counter = itertools.count()
    assert eventually(lambda: next(counter) >= 3, interval=0) is True
    values = iter([{}, {"status": "running"}, {"status": "finished", "id": 7}])
    got = eventually(
        lambda: next(values), until=lambda r: r.get("status") == "finished", interval=0
    )
    assert got == {"status": "finished", "id": 7}


def test_a_timeout_names_what_was_awaited_and_the_last_value_seen() -> None:
    values = itertools.count()
    with pytest.raises(AssertionError) as caught:
        eventually(lambda: {"n": next(values)}, until=lambda r: False, timeout=0, interval=0,
                   message="build 3 to finish")  # fmt: skip
    assert "waiting for build 3 to finish; last: {'n': 0}" in str(caught.value)


def test_a_long_last_value_is_cut() -> None:
    with pytest.raises(AssertionError) as caught:
        eventually(lambda: "x" * 10_000, until=lambda r: False, timeout=0, message="m")
    assert "(10002 characters)" in str(caught.value) and len(str(caught.value)) < 3200


def test_ignored_exceptions_are_not_yet_and_others_propagate() -> None:
    attempts = iter([ConnectionError("refused"), ConnectionError("refused"), "up"])

    def read() -> str:
        got = next(attempts)
        if isinstance(got, Exception):
            raise got
        return got

    assert eventually(read, ignoring=(ConnectionError,), interval=0) == "up"
    with pytest.raises(AssertionError) as caught:
        eventually(read_refused, ignoring=(ConnectionError,), timeout=0, message="the service")
    assert "last: ConnectionError('refused')" in str(caught.value)
    with pytest.raises(KeyError):
        eventually(lambda: {}["missing"], ignoring=(ConnectionError,))


def read_refused() -> str:
    raise ConnectionError("refused")
