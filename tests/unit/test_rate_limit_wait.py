"""What GitHub's answer to a token over its rate limit asks a sender to wait
(``service.outbound.github.rate_limit_wait``), as GitHub's REST documentation words the headers."""

from __future__ import annotations

import pytest

from service.outbound.github import rate_limit_wait

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("code", "headers", "wait"),
    [
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 90)}, 90.0),
        (429, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 5)}, 5.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) - 5)}, 1.0),
        (403, {"x-ratelimit-remaining": "0"}, 60.0),  # no reset given: a minute
        (403, {"retry-after": "30", "x-ratelimit-remaining": "12"}, 30.0),  # a secondary limit
        (429, {"retry-after": "7"}, 7.0),
        (403, {}, None),  # missing permissions: waiting changes nothing
        (403, {"x-ratelimit-remaining": "12"}, None),
        (403, {"retry-after": "soon"}, None),  # not a number of seconds: not GitHub's words
        (500, {"retry-after": "30"}, None),  # a 5xx is retried by the doubling wait
        (201, {"x-ratelimit-remaining": "0"}, None),
    ],
)
def test_the_wait_github_asks_for(code: int, headers: dict[str, str], wait: float | None) -> None:
    assert rate_limit_wait(code, headers, NOW) == wait
