"""Watching the reference consumer decide one refusal row, with the wrapper's call intercepted.

The grouped-GEMM kernels need an sm_100 GPU, so ``intercepted`` replaces the wrapper on the
``cudnn`` package by a recorder that keeps its signature and docs; the consumer runs on small
placeholder inputs, and ``observe`` classifies what it did (refused, called without the knob, with
``deterministic=True`` or ``False``, or an error) and keeps the exact keyword arguments.
Standard library, torch and the candidate only.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from runner.inside import consumer
from runner.inside.refusal_rows import Row, request_state


@contextlib.contextmanager
def intercepted(activation: str) -> Iterator[list[dict[str, Any]]]:
    """Replace the wrapper on the ``cudnn`` package by a recorder that keeps its signature and docs.

    ``functools.wraps`` copies ``__doc__`` and sets ``__wrapped__``, which ``inspect.signature``
    follows, so the consumer's feature detection reads the real wrapper.
    """
    import cudnn

    name = consumer.WRAPPERS[activation].name
    real = getattr(cudnn, name)
    calls: list[dict[str, Any]] = []

    @functools.wraps(real)
    def recorder(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append({"positional": len(args), "kwargs": dict(kwargs)})
        return _placeholder_outputs(kwargs)

    setattr(cudnn, name, recorder)
    try:
        yield calls
    finally:
        setattr(cudnn, name, real)


_TOKENS, _EXPERTS, _HIDDEN, _N = 8, 2, 16, 32


def placeholder_inputs(activation: str) -> dict[str, Any]:
    """Small CPU tensors in the wrapper's argument layout; the kernel never sees them."""
    n_c = 2 * _N if activation == "swiglu" else _N
    token_expert = torch.arange(_TOKENS) * _EXPERTS // _TOKENS
    inputs: dict[str, Any] = {
        "a_tensor": torch.randn(_TOKENS, _HIDDEN, 1),
        "b_tensor": torch.randn(_N, _HIDDEN, _EXPERTS),
        "c_tensor": torch.randn(_TOKENS, n_c, 1),
        "sfa_tensor": None,
        "sfb_tensor": None,
        "padded_offsets": torch.bincount(token_expert, minlength=_EXPERTS).cumsum(0),
        "alpha_tensor": torch.ones(_EXPERTS),
        "prob_tensor": torch.rand(_TOKENS, 1, 1),
        "grad_output": torch.randn(_TOKENS, _HIDDEN),
        "scale_bias": torch.randn(_EXPERTS, _HIDDEN),
        "token_expert": token_expert,
    }
    if activation == "swiglu":
        inputs["beta_tensor"] = torch.zeros(_EXPERTS)
    return inputs


def _placeholder_outputs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    c = kwargs.get("c_tensor")
    rows = c.shape[0] if isinstance(c, torch.Tensor) else _TOKENS
    return {
        "d_row_tensor": torch.zeros(rows, _N, 1),
        "dprob_tensor": kwargs.get("dprob_tensor"),
        "dbias_tensor": torch.zeros(_EXPERTS, _N, 1) if kwargs.get("generate_dbias") else None,
    }


def _summarize(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"Tensor{tuple(value.shape)}:{str(value.dtype).removeprefix('torch.')}"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


# ---------------------------------------------------------------- one row


def observe(row: Row) -> dict[str, Any]:
    """Run the consumer for one row; classify what it did and keep the exact keyword arguments."""
    inputs = placeholder_inputs(row.activation)
    calls: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    try:
        with request_state(row.request) as state, intercepted(row.activation) as calls:
            consumer.backward_step(row.step, inputs)
    except RuntimeError as exc:
        # Only the consumer's own refusal counts: raised before the wrapper, and not a subclass
        # such as NotImplementedError.
        if type(exc) is RuntimeError and not calls:
            return {"observed": "refuse", "detail": str(exc), "kwargs": {}, "state": state}
        return _error(exc, calls, state)
    except Exception as exc:
        return _error(exc, calls, state)
    if len(calls) != 1:
        return {
            "observed": "error",
            "detail": f"the wrapper was called {len(calls)} times, not once",
            "kwargs": {},
            "state": state,
        }
    call = calls[0]
    kwargs = {k: _summarize(v) for k, v in call["kwargs"].items()}
    if call["positional"]:
        kwargs["__positional__"] = call["positional"]
    if consumer.KNOB not in call["kwargs"]:
        observed, detail = "default", "called without the knob"
    elif call["kwargs"][consumer.KNOB] is True:
        observed, detail = "deterministic", "called with deterministic=True"
    elif call["kwargs"][consumer.KNOB] is False:
        observed, detail = "passed_false", "called with deterministic=False"
    else:
        observed = "error"
        detail = f"called with deterministic={call['kwargs'][consumer.KNOB]!r}"
    return {"observed": observed, "detail": detail, "kwargs": kwargs, "state": state}


_told: set[str] = set()


def _error(exc: BaseException, calls: list[Any], state: dict[str, Any]) -> dict[str, Any]:
    where = "after" if calls else "before"
    first = f"{type(exc).__name__}: {exc}"
    if first not in _told:  # each distinct error's traceback once, in the stage's log
        _told.add(first)
        traceback.print_exception(exc, file=sys.stderr)
    return {
        "observed": "error",
        "detail": f"{type(exc).__name__} {where} the wrapper call: {exc}",
        "kwargs": {},
        "state": state,
    }
