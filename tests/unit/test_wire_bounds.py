"""The runner protocol's models refuse what no honest runner sends (``core/bounds.py``), and the
runner keeps a candidate's document within them (``bounds.fit``). Pure: the HTTP side of the same
door is ``tests/functional/test_runner_door.py``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from core import bounds
from core.subjects import SUBJECTS
from core.wire import (
    JobFinish,
    RememberedConfig,
    RunnerRegister,
    RunnerResume,
    Stage,
    StagePost,
    Status,
)
from core.wire.results import undeclared_configs
from runner.pipeline.stage_results import accepted

SDPA = SUBJECTS["sdpa_bwd"].config_names
RAW = '{"lease_token": "t", "result": {"name": "probe", "status": "pass", "duration_s": 0.0}}'


def post(**result: Any) -> dict[str, Any]:
    return {"lease_token": "t", "result": {"name": "determinism", "status": "pass", **result}}


def check(name: str = "sdpa_bwd.deterministic", **metrics: Any) -> dict[str, Any]:
    return {"name": name, "status": "pass", "detail": "", "metrics": metrics}


def drift(**over: Any) -> dict[str, Any]:
    row = {"subject": "sdpa_bwd", "output": "dq", "arm": "control", "runs": 8, "differing": 3}
    return {**row, "distinct": 4, "max_abs_diff": 1e-3, "finite": True, **over}


def refused(model: type, body: dict[str, Any] | str) -> str:
    """The refusal's first error, as ``loc: msg``; fails the test if the body is accepted."""
    data = json.loads(body) if isinstance(body, str) else body
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    err = caught.value.errors()[0]
    return f"{'.'.join(map(str, err['loc']))}: {err['msg']}"


def test_an_honest_determinism_post_is_accepted() -> None:
    body = post(
        duration_s=12.5,
        checks=[check(config={"name": SDPA[1], "b": 4}, config_name=SDPA[1], luck=1e-4)],
        drift=[drift(config={"name": SDPA[1]}, luck_probability=7e-4)],
        timings={"stage": {"wall_s": 12.5, "warm": True}},
    )
    assert StagePost.model_validate(body).result.checks[0].metrics["config_name"] == SDPA[1]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        # NaN and inf as JSON carries them (Python's json reads NaN, Infinity and 1e999 as floats)
        (RAW.replace("0.0", "NaN"), "duration_s"),
        (RAW.replace("0.0", "1e999"), "duration_s"),
        (
            '{"lease_token": "t", "result": {"name": "probe", "status": "pass", "duration_s": -1}}',
            "duration_s",
        ),
        (post(drift=[drift(max_abs_diff=math.inf)]), "max_abs_diff"),
        (post(drift=[drift(max_abs_diff=math.nan)]), "max_abs_diff"),
        (post(drift=[drift(luck_probability=1.5)]), "luck_probability"),
        (post(drift=[drift(runs=-1)]), "runs"),
        (post(drift=[drift(differing=10**12)]), "differing"),
        (post(timings={"stage": {"wall_s": math.inf}}), "timings"),
        (post(checks=[check(max_abs_err=math.nan)]), "metrics"),
        (post(checks=[check(nested={"deeper": [1.0, -math.inf]})]), "metrics"),
        (post(checks=[check(big=10**30)]), "metrics"),
    ],
)
def test_numbers_must_be_finite_and_counts_in_range(body: dict[str, Any] | str, where: str) -> None:
    assert where in refused(StagePost, body)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (post(reason="x" * (bounds.TEXT_CHARS + 1)), "reason"),
        (post(log_tail="x" * (bounds.LOG_CHARS + 1)), "log_tail"),
        (post(checks=[{**check(), "detail": "d" * (1 << 20)}]), "detail"),
        (post(checks=[check(name="n" * 201)]), "name"),
        (post(checks=[check(blob="b" * (bounds.TEXT_CHARS + 1))]), "metrics"),
        (post(checks=[check(**{"k" * 201: 1})]), "metrics"),
        (post(checks=[check(deep=json.loads("[" * 20 + "]" * 20))]), "metrics"),
        (post(checks=[check(wide=list(range(bounds.JSON_NODES)))]), "metrics"),
        (post(checks=[check()] * 2001), "checks"),
        (post(findings=[{"kind": "k", "severity": "error", "message": "m" * 9000}]), "message"),
        (post(findings=[{"kind": "k" * 65, "severity": "error", "message": "m"}]), "kind"),
        (post(drift=[drift(subject="s" * 65)]), "subject"),
        (post(version="1." * 60), "version"),
    ],
)
def test_texts_lists_and_documents_are_bounded(body: dict[str, Any], where: str) -> None:
    assert where in refused(StagePost, body)


def test_a_config_must_be_one_its_subject_declares() -> None:
    """The rule the service applies to a stage post (``422 unknown_config``, before anything is
    stored: ``tests/functional/test_runner_door.py``) and the runner to a stage's document."""
    cases = {
        "x" * 300: post(checks=[check(config={"name": "x" * 300})]),
        "b99_nothing": post(checks=[check(config_name="b99_nothing")]),
        SDPA[0]: post(checks=[check(name="flex_attention_bwd.deterministic", config_name=SDPA[0])]),
        "b98_nothing": post(drift=[drift(config={"name": "b98_nothing"})]),
    }
    for name, body in cases.items():
        bad = undeclared_configs(StagePost.model_validate(body).result)
        assert bad is not None and bad.config == name[: bounds.NAME_CHARS], name
        assert bad.known and str(bad).startswith(f"{bad.subject} has no config")
    made_up = post(checks=[check(name="no_such_subject.deterministic", config_name=SDPA[0])])
    bad = undeclared_configs(StagePost.model_validate(made_up).result)
    assert bad is not None and bad.known is None and "not a subject" in str(bad)
    # a declared config, or a check that names none, is not refused
    for body in (
        post(checks=[check(config={"name": SDPA[1]}, config_name=SDPA[1])]),
        post(checks=[check(name="consumer.srelu", status_text="x")]),
    ):
        assert undeclared_configs(StagePost.model_validate(body).result) is None
    # the runner refuses it too, before the post: a stage that names one is an error there
    doc = {"status": "pass", "reason": "", "checks": [check(config_name="b99_nothing")]}
    why = accepted(Stage.determinism, doc, 1.0)
    assert isinstance(why, str) and "b99_nothing" in why and SDPA[0] in why


def test_remembered_configs_are_declared_ones_of_a_real_family() -> None:
    ok = RememberedConfig(subject="sdpa_bwd", family="sm_90", config=SDPA[2])
    assert ok.config == SDPA[2]
    for bad in (
        {"subject": "sdpa_bwd", "family": "sm_90", "config": "x" * 150},
        {"subject": "sdpa_bwd", "family": "sm_75", "config": SDPA[0]},
        {"subject": "made_up", "family": "sm_90", "config": SDPA[0]},
    ):
        refused(RememberedConfig, bad)


def test_registration_labels_and_the_finish_are_bounded() -> None:
    RunnerRegister.model_validate({"name": "h200-1", "labels": {"arch": "sm_90", "gpu": "H200"}})
    assert "labels" in refused(RunnerRegister, {"name": "r", "labels": {"gpu": "x" * 8_000_000}})
    assert "labels" in refused(RunnerRegister, {"name": "r", "labels": {"k" * 65: "v"}})
    many = {f"l{i}": "v" for i in range(33)}
    assert "labels" in refused(RunnerRegister, {"name": "r", "labels": many})
    # a restarted runner sends its labels again: the same bounds
    assert "labels" in refused(RunnerResume, {"labels": {"gpu": "x" * 8_000_000}})
    gpu = {"lease_token": "t", "environment": {"gpu": "NVIDIA " + "H" * 300}}
    assert "gpu" in refused(JobFinish, gpu)
    assert "error" in refused(JobFinish, {"lease_token": "t", "error": "e" * (1 << 20)})


def test_the_runner_fits_a_candidates_document_instead_of_losing_the_stage() -> None:
    """A long exception message or a NaN the candidate wrote is clipped or nulled; the stage's
    status stands (what the service would refuse never leaves the runner)."""
    doc = {
        "status": "fail",
        "reason": "r" * 50_000,
        "log_tail": "start " + "l" * 50_000 + " end",
        "checks": [check(name="sdpa_bwd.dq", max_abs_err=math.nan, worst_ratio=math.inf)],
    }
    result = accepted(Stage.numerics, doc, 1.0)
    assert not isinstance(result, str), result
    assert result.status == Status.fail
    assert len(result.reason) == bounds.TEXT_CHARS and "characters cut" in result.reason
    assert len(result.log_tail) == bounds.LOG_CHARS and result.log_tail.endswith(" end")
    assert result.checks[0].metrics == {"max_abs_err": None, "worst_ratio": None}
    # a name too long is not the candidate's prose: the stage is refused, saying where
    long_name = accepted(Stage.numerics, {**doc, "checks": [check(name="n" * 300)]}, 1.0)
    assert isinstance(long_name, str) and "checks.0.name" in long_name
