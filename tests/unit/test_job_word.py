"""The one word for each job state (``core.wire.job_word``): every state and outcome a job can be
in has exactly one, and the report's ``jobs[].shown`` is it."""

from __future__ import annotations

import pytest

from core.wire import JobKind, JobOutcome, JobReport, JobState, Shown, job_word

CASES = [
    (JobState.waiting, None, None, Shown.pending),  # its build job's wheel first
    (JobState.queued, None, None, Shown.pending),  # a runner that can take it is alive
    (JobState.queued, None, "no runner with arch=sm_100 is alive", Shown.waiting),
    (JobState.leased, None, None, Shown.running),
    (JobState.finished, JobOutcome.ran, None, Shown.finished),
    (JobState.finished, JobOutcome.skipped, None, Shown.skipped),
    (JobState.finished, JobOutcome.error, None, Shown.error),
    (JobState.cancelled, JobOutcome.cancelled, None, Shown.cancelled),
    (JobState.cancelled, None, None, Shown.cancelled),
]


@pytest.mark.parametrize(("state", "outcome", "waiting", "word"), CASES)
def test_each_job_state_has_its_one_word(
    state: JobState, outcome: JobOutcome | None, waiting: str | None, word: Shown
) -> None:
    assert job_word(state, outcome, waiting) == word
    job = JobReport(kind=JobKind.gpu, status=state, outcome=outcome, waiting=waiting)
    assert job.shown == word
    # read back from the JSON a client gets (a stored report too): the same word
    assert JobReport.model_validate_json(job.model_dump_json()).shown == word


def test_every_state_is_covered() -> None:
    assert {s for s, *_ in CASES} == set(JobState)
    assert {w for *_, w in CASES} == set(Shown)
