"""The two text rules of the service's integrity: what the door stores (``core.bounds``) and what
a log is served as (``core.text.visible``)."""

from __future__ import annotations

import json

import pytest

from core import bounds
from core.text import visible
from core.wire import StagePost

REFUSED = [chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"]
REFUSED += ["\ud800", "\udbff", "\udc00", "\udfff", "\ufffe", "\uffff"]


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_every_character_postgres_or_xml_refuses_is_replaced_one_for_one(char: str) -> None:
    assert bounds.storable(f"a{char}b") == "a\ufffdb"


def test_what_postgres_and_xml_take_is_kept() -> None:
    kept = "tab\t nl\n cr\r del\x7f c1\x85 bom\ufeff \ufffd emoji\U0001f600 ü"
    assert bounds.storable(kept) == kept
    assert bounds.loggable(kept) == kept


def test_a_log_keeps_its_controls_legible_and_its_bound_is_what_was_sent() -> None:
    assert bounds.loggable("\x1b[31mred\x00\ud800") == "\\x1b[31mred\\x00\ufffd"
    at_bound = "\x1b" * bounds.LOG_CHARS
    body = {"lease_token": "t", "result": {"name": "probe", "status": "pass",
            "log_tail": at_bound}}  # fmt: skip
    assert StagePost.model_validate(body).result.log_tail == "\\x1b" * bounds.LOG_CHARS
    body["result"]["log_tail"] += "x"  # type: ignore[index]
    with pytest.raises(ValueError, match="log_tail"):
        StagePost.model_validate(body)


def test_metrics_are_cleaned_key_and_value_at_every_depth() -> None:
    raw = '{"k\\u0000": ["\\ud800", {"deep\\u0007": "v\\uffff"}], "n": 1.5}'
    body = {"lease_token": "t", "result": {"name": "probe", "status": "pass",
            "checks": [{"name": "c", "status": "pass", "metrics": json.loads(raw)}]}}  # fmt: skip
    metrics = StagePost.model_validate(body).result.checks[0].metrics
    assert metrics == {"k\ufffd": ["\ufffd", {"deep\ufffd": "v\ufffd"}], "n": 1.5}


def test_served_text_shows_every_control_but_newline_and_tab() -> None:
    sent = "a\x1b]0;t\x07b\rc\r\nd\x7f\x9b\u202e\u2066\te\n"
    assert visible(sent) == "a\\x1b]0;t\\x07b\\x0dc\nd\\x7f\\x9b\\u202e\\u2066\te\n"
    assert visible(visible(sent)) == visible(sent)  # served twice reads the same
