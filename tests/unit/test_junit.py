"""The JUnit XML is well formed whatever a report holds: property tests over arbitrary text (control
characters, lone surrogates, huge names) in every field that reaches it, parsed back with
``xml.etree``.

Was: a check name with a control character made ``junit.xml`` not well formed (the names and
attributes were written as they came; only details and log tails were cleaned). The reports are
built as the service reads stored rows (``service.results.assemble.stored``: not validated again),
so the text here is what an old row or a future bound could hold, not only what the door lets in
today.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.wire import (
    BuildReport,
    BuildStatus,
    Check,
    Finding,
    JobKind,
    JobReport,
    JobState,
    NotRun,
    Severity,
    Stage,
    StageResult,
    Status,
    Verdict,
)
from service.results.assemble import stored
from service.web.junit import NAME_CHARS, TEXT_CHARS, junit_xml

# Any code point, lone surrogates and C0/C1 controls included.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=300)


def legal(ch: str) -> bool:
    """XML 1.0's Char production."""
    c = ord(ch)
    return (
        ch in "\t\n\r" or 0x20 <= c <= 0xD7FF or 0xE000 <= c <= 0xFFFD or 0x10000 <= c <= 0x10FFFF
    )


def shown(text: str) -> str:
    """What the XML should carry for ``text``: its legal characters as they are, each other one
    as U+FFFD."""
    return "".join(ch if legal(ch) else "\ufffd" for ch in text)


def as_parsed(text: str) -> str:
    """An element's text after a parser's end-of-line handling."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def report(
    checks: list[tuple[str, Status, str]], reason: str, log: str, words: list[str]
) -> BuildReport:
    runner, version, message, why = words
    stage = stored(
        StageResult,
        name=Stage.determinism,
        status=Status.fail,
        reason=reason,
        duration_s=1.0,
        log_tail=log,
        checks=[stored(Check, name=n, status=s, detail=d, metrics={}) for n, s, d in checks],
    )
    job = stored(
        JobReport,
        id=1,
        kind=JobKind.gpu,
        family="sm_90",
        runner=runner,
        status=JobState.finished,
        stages=[stage],
    )
    finding = stored(Finding, kind="k", severity=Severity.error, subject=None, message=message)
    return stored(
        BuildReport,
        id=7,
        source="wheel",
        version=version,
        status=BuildStatus.finished,
        verdict=Verdict.fail,
        jobs=[job],
        findings=[finding],
        not_run=[stored(NotRun, subject="s", status=Status.skipped, reason=why)],
    )


CHECKS = st.lists(
    st.tuples(ANY_TEXT, st.sampled_from(list(Status)), ANY_TEXT), min_size=1, max_size=4
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same 300 reports on every run: a failure reproduces
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# and the two that broke it: a control character in a name; a reason ending in ": " (was cut off)
@example(checks=[("a\x01b", Status.fail, "d")], reason="r", log="l", words=["w", "v", "m", "a: "])
@given(
    checks=CHECKS,
    reason=ANY_TEXT,
    log=ANY_TEXT,
    words=st.lists(ANY_TEXT, min_size=4, max_size=4),
)
def test_any_text_gives_well_formed_junit_whose_names_keep_their_legal_characters(
    checks: list[tuple[str, Status, str]], reason: str, log: str, words: list[str]
) -> None:
    root = ET.fromstring(junit_xml(report(checks, reason, log, words)))  # parses, or fails here
    (suite, not_run, findings) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [shown(n) for n, _, _ in checks]
    for case, (_name, status, detail) in zip(cases, checks, strict=True):
        if status == Status.fail:
            assert (case.find("failure").text or "") == as_parsed(shown(detail))  # type: ignore[union-attr]
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["stage_reason"] == shown(reason) and props["runner"] == shown(words[0])
    assert (suite.findtext("system-out") or "") == as_parsed(shown(log))
    assert shown(words[1]) in (root.get("name") or "")
    failure = findings.find("testcase/failure")
    assert failure is not None and (failure.text or "") == as_parsed(shown(words[2]))
    skipped = not_run.find("testcase/skipped")
    assert skipped is not None and shown(words[3]) in (skipped.get("message") or "")


def test_huge_names_and_texts_are_cut_and_still_parse() -> None:
    name = "n\x00" * 500_000  # a megabyte of name, half of it illegal
    detail = "d" * 5_000_000
    xml = junit_xml(report([(name, Status.fail, detail)], "r", "l" * 5_000_000, ["w"] * 4))
    assert len(xml) < 4 * TEXT_CHARS + 64 * NAME_CHARS  # bounded, whatever came in
    case = ET.fromstring(xml).find("testsuite/testcase")
    assert case is not None
    got = case.get("name") or ""
    assert len(got) == NAME_CHARS and got.startswith("n\ufffdn\ufffd") and got.endswith("[cut]")
    failure = case.find("failure")
    assert failure is not None and len(failure.text or "") == TEXT_CHARS
