"""The reference consumer's decision logic, run in-process on stand-in wrappers.

The grouped-GEMM wrappers need an sm_100 GPU, so these tests hand ``backward_step`` plain Python
functions shaped like them (keyword arguments in, a dict of outputs back) and assert what the
consumer asked of them. The real wrappers are exercised through ``test_refusal.py``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from core import subjects
from runner.inside import consumer
from runner.inside.consumer import KnobSupport, StepConfig

ENV = consumer.ENV_VAR


@pytest.fixture(autouse=True)
def _torch_flag() -> Iterator[None]:
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])


def _request(monkeypatch: pytest.MonkeyPatch, env: str | None, flag: bool) -> None:
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    torch.use_deterministic_algorithms(flag, warn_only=True)


class Recorder:
    """A stand-in wrapper: records each call's keyword arguments, returns the wrapper's outputs."""

    def __init__(self, *, knob: bool = True, n: int = 4, experts: int = 2) -> None:
        self.calls: list[dict[str, Any]] = []
        self.n, self.experts = n, experts
        self.__signature__ = _signature(knob)
        self.__doc__ = "deterministic: make dprob and dbias bit-exact run to run."

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        dbias = torch.full((self.experts, self.n, 1), 3.0) if kwargs["generate_dbias"] else None
        return {"dprob_tensor": kwargs["dprob_tensor"], "dbias_tensor": dbias}


def _signature(knob: bool) -> inspect.Signature:
    def with_knob(
        a_tensor: Any = None,
        prob_tensor: Any = None,
        dprob_tensor: Any = None,
        generate_dbias: bool = False,
        deterministic: bool | None = None,
    ) -> None: ...

    def without_knob(
        a_tensor: Any = None,
        prob_tensor: Any = None,
        dprob_tensor: Any = None,
        generate_dbias: bool = False,
    ) -> None: ...

    return inspect.signature(with_knob if knob else without_knob)


class Unreadable:
    """A callable whose signature cannot be read: inspect.signature raises ValueError."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    @property
    def __signature__(self) -> Any:
        raise ValueError("no signature found for builtin")

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {"dprob_tensor": kwargs["dprob_tensor"]}


def _inputs(tokens: int = 6, hidden: int = 5, experts: int = 2) -> dict[str, Any]:
    torch.manual_seed(0)
    return {
        "a_tensor": torch.randn(tokens, hidden, 1),
        "prob_tensor": torch.rand(tokens, 1, 1),
        "grad_output": torch.randn(tokens, hidden),
        "scale_bias": torch.randn(experts, hidden),
        "token_expert": torch.tensor([0, 0, 0, 1, 1, 1]),
    }


# ---------------------------------------------------------------- the two-knob request


@pytest.mark.parametrize(
    ("env", "flag", "requested"),
    [
        (None, False, False),
        ("1", False, False),
        ("", False, False),
        ("0", False, True),
        (None, True, True),
        ("0", True, True),
        ("1", True, True),  # the variable's default is no request: the torch flag still wins
    ],
)
def test_request_is_the_union_of_the_variable_and_the_torch_flag(
    monkeypatch: pytest.MonkeyPatch, env: str | None, flag: bool, requested: bool
) -> None:
    _request(monkeypatch, env, flag)
    assert consumer.determinism_requested() is requested


def test_an_unparsable_variable_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    _request(monkeypatch, "false", False)
    with pytest.raises(RuntimeError, match=ENV):
        consumer.determinism_requested()


# ---------------------------------------------------------------- feature detection


def test_knob_is_found_on_the_signature_with_its_default() -> None:
    def wrapper(a_tensor: Any, deterministic: bool | None = None) -> None: ...

    support = consumer.detect_knob(wrapper)
    assert support.present and support.default == "None"


@pytest.mark.parametrize(
    "wrapper",
    [
        pytest.param(lambda a_tensor, generate_dbias=False: None, id="absent"),
        pytest.param(lambda a_tensor, **kwargs: None, id="only-var-keyword"),
        pytest.param(lambda deterministic=None, /: None, id="positional-only"),
    ],
)
def test_a_knob_not_passable_by_keyword_is_no_knob(wrapper: Any) -> None:
    assert consumer.detect_knob(wrapper).present is False


@pytest.mark.parametrize("wrapper", [Unreadable(), 42], ids=["ValueError", "TypeError"])
def test_an_unreadable_signature_answers_no_knob(wrapper: Any) -> None:
    support = consumer.detect_knob(wrapper)
    assert support.present is False
    assert support.error and "signature unreadable" in support.error


def test_an_unreadable_wrapper_is_refused_when_requested_and_called_plainly_when_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrapper = Unreadable()
    step = StepConfig("srelu")
    _request(monkeypatch, "0", False)
    with pytest.raises(RuntimeError, match="nvidia-cudnn-frontend"):
        consumer.backward_step(step, _inputs(), wrapper=wrapper)
    assert wrapper.calls == []
    _request(monkeypatch, None, False)
    consumer.backward_step(step, _inputs(), wrapper=wrapper)
    assert len(wrapper.calls) == 1 and consumer.KNOB not in wrapper.calls[0]


def test_a_missing_frontend_answers_not_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cudnn", None)  # import cudnn -> ImportError
    support = consumer.knob_support("swiglu")
    assert (support.importable, support.present) == (False, False)
    _request(monkeypatch, "0", False)
    with pytest.raises(RuntimeError, match="is not in this build"):
        consumer.backward_step(StepConfig("swiglu"), _inputs())
    _request(monkeypatch, None, False)
    with pytest.raises(ImportError):
        consumer.backward_step(StepConfig("swiglu"), _inputs())


# ---------------------------------------------------------------- dbias coverage from the docs

ARGS_COVERED = """Wrapper.

Args:
    generate_dbias: Optional flag to allocate and return dbias output
    deterministic: Make dprob and dbias bit-exact run to run; raises NotImplementedError
        for any framework other than torch.
    current_stream: CUDA stream
"""
ARGS_SILENT = """Wrapper.

Args:
    generate_dbias: Optional flag to allocate and return dbias output
    deterministic: Make dprob bit-exact run to run.
    current_stream: CUDA stream
"""
PROSE_NOT_COVERED = """Dispatch grouped GEMM dGLU.

``deterministic=True`` makes ``dprob`` bit-identical run to run (block-scaled kernel, torch,
no dbias). See the docs.
"""


@pytest.mark.parametrize(
    ("doc", "coverage"),
    [
        (ARGS_COVERED, "covered"),
        (PROSE_NOT_COVERED, "not_covered"),
        ("deterministic: bit-exact dprob; it does not cover dbias.", "not_covered"),
        ("deterministic: bit-exact dprob. dbias is not deterministic.", "not_covered"),
        (ARGS_SILENT, "undocumented"),  # another argument's mention of dbias does not count
        ("", "undocumented"),
    ],
)
def test_dbias_coverage_is_read_from_the_knobs_own_passage(doc: str, coverage: str) -> None:
    assert consumer.dbias_coverage(doc) == coverage


# ---------------------------------------------------------------- decisions and the message

HAS_KNOB = KnobSupport(importable=True, present=True, default="None", covers_dbias="covered")
NO_KNOB = KnobSupport(importable=True, present=False)
NO_DBIAS = KnobSupport(importable=True, present=True, default="False", covers_dbias="not_covered")


@pytest.mark.parametrize(
    ("step", "support", "names"),
    [
        (StepConfig("srelu"), NO_KNOB, ["nvidia-cudnn-frontend 1.28.0", "dsrelu"]),
        (StepConfig("swiglu"), NO_KNOB, ["nvidia-cudnn-frontend", "activation to srelu"]),
        (StepConfig("swiglu", fc1_bias=True), NO_DBIAS, ["drop the FC1 bias", "does not cover"]),
        (StepConfig("srelu", scale_bias=True), HAS_KNOB, ["drop the FC2 scale bias"]),
    ],
)
def test_a_refusal_names_what_to_change(
    step: StepConfig, support: KnobSupport, names: list[str]
) -> None:
    decision = consumer.decide(step, support, requested=True)
    assert decision.refusal and not decision.pass_knob
    for name in names:
        assert name in decision.refusal
    assert f"{ENV}=1" in decision.refusal  # and how to stop asking


def test_the_release_advice_comes_from_the_ledger() -> None:
    """The ledger is the one record of when a knob shipped: dGLU's came in 1.29.1 and 1.30.0
    dropped it again, so the advice names both and no second table can disagree."""
    history = subjects.release_history()
    for activation, wrapper in consumer.WRAPPERS.items():
        entry = history[subjects.SUBJECTS[wrapper.subject].feature]
        refusal = consumer.decide(StepConfig(activation), NO_KNOB, requested=True).refusal
        assert refusal and f"nvidia-cudnn-frontend {entry['since']} or later" in refusal
        for missing in entry.get("missing_in", ()):
            assert f"(not {missing})" in refusal
    assert "1.29.1 or later (not 1.30.0)" in consumer.WRAPPERS["swiglu"].knob_release


def test_every_problem_is_named_in_the_one_message() -> None:
    step = StepConfig("swiglu", fc1_bias=True, scale_bias=True)
    message = consumer.decide(step, NO_DBIAS, requested=True).refusal
    assert message and "FC1 bias" in message and "scale bias" in message
    assert "; and " in message  # both must be fixed, not either


def test_undocumented_dbias_coverage_refuses_a_bias_gradient() -> None:
    support = KnobSupport(importable=True, present=True, covers_dbias="undocumented")
    decision = consumer.decide(StepConfig("srelu", fc1_bias=True), support, requested=True)
    assert decision.refusal and "does not document" in decision.refusal


@pytest.mark.parametrize("support", [HAS_KNOB, NO_KNOB, NO_DBIAS])
def test_unit_scale_or_no_request_neither_refuses_nor_passes_the_knob(
    support: KnobSupport,
) -> None:
    worst = StepConfig("swiglu", fc1_bias=True, scale_bias=True)
    for step, requested in [
        (StepConfig("swiglu", True, True, unit_scale=True), True),
        (worst, False),
    ]:
        decision = consumer.decide(step, support, requested=requested)
        assert (decision.refusal, decision.pass_knob) == (None, False)


# ---------------------------------------------------------------- the step against a wrapper


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("env", [None, "0", "1"])
@pytest.mark.parametrize("unit_scale", [False, True])
def test_the_knob_is_true_or_absent_never_false(
    monkeypatch: pytest.MonkeyPatch, env: str | None, flag: bool, unit_scale: bool
) -> None:
    wrapper = Recorder()
    _request(monkeypatch, env, flag)
    consumer.backward_step(StepConfig("srelu", unit_scale=unit_scale), _inputs(), wrapper=wrapper)
    (kwargs,) = wrapper.calls
    requested = env == "0" or flag
    if requested and not unit_scale:
        assert kwargs[consumer.KNOB] is True
    else:
        assert consumer.KNOB not in kwargs


def test_unit_scale_sends_no_prob_and_no_dprob(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = Recorder()
    _request(monkeypatch, "0", True)
    out = consumer.backward_step(StepConfig("srelu", unit_scale=True), _inputs(), wrapper=wrapper)
    assert wrapper.calls[0]["prob_tensor"] is None and wrapper.calls[0]["dprob_tensor"] is None
    assert out.dprob is None


def test_swiglu_goes_through_dglu_with_dswiglu(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = Recorder()
    _request(monkeypatch, None, False)
    consumer.backward_step(StepConfig("swiglu", fc1_bias=True), _inputs(), wrapper=wrapper)
    assert wrapper.calls[0]["act_func"] == "dswiglu"
    assert wrapper.calls[0]["generate_dbias"] is True
    assert consumer.WRAPPERS["swiglu"].name == "grouped_gemm_dglu_wrapper_sm100"
    assert consumer.WRAPPERS["srelu"].name == "grouped_gemm_dsrelu_wrapper_sm100"


def test_fc1_bias_gradient_comes_back_from_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper = Recorder()
    _request(monkeypatch, "0", False)
    out = consumer.backward_step(StepConfig("srelu", fc1_bias=True), _inputs(), wrapper=wrapper)
    assert wrapper.calls[0]["generate_dbias"] is True and wrapper.calls[0]["deterministic"] is True
    assert out.fc1_dbias is not None and torch.all(out.fc1_dbias == 3.0)


def test_scale_bias_adds_its_reduction_to_dprob(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs()
    _request(monkeypatch, None, False)
    out = consumer.backward_step(StepConfig("srelu", scale_bias=True), inputs, wrapper=Recorder())
    dy, bias, experts = inputs["grad_output"], inputs["scale_bias"], inputs["token_expert"]
    probs = inputs["prob_tensor"].reshape(-1)
    want_dprob = torch.stack([dy[t] @ bias[experts[t]] for t in range(len(experts))])
    want_dbias = torch.stack(
        [(dy[experts == e] * probs[experts == e, None]).sum(0) for e in range(bias.shape[0])]
    )
    assert out.dprob is not None and out.scale_bias_grad is not None
    torch.testing.assert_close(out.dprob.reshape(-1), want_dprob)
    torch.testing.assert_close(out.scale_bias_grad, want_dbias)


def test_scale_bias_under_a_request_refuses_before_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrapper = Recorder()
    _request(monkeypatch, None, True)
    with pytest.raises(RuntimeError, match="scale bias"):
        consumer.backward_step(StepConfig("srelu", scale_bias=True), _inputs(), wrapper=wrapper)
    assert wrapper.calls == []
