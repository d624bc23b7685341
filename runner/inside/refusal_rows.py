"""The refusal stage's rows: the grid of requests and options, and what the contract expects.

A row is activation x request x scale bias x FC1 bias x unit scale (80 in all). ``REQUESTS`` says
how each request is made (the environment variable, the torch flag, both); ``expected_outcome``
states the contract on its own, from the row and what this build's wrapper offers; and
``request_state`` sets a row's request in this process and restores the state after it.
Standard library, torch and the candidate only.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from runner.inside import consumer

ACTIVATIONS: tuple[str, ...] = tuple(consumer.WRAPPERS)
SUBJECT_OF: dict[str, str] = {a: w.subject for a, w in consumer.WRAPPERS.items()}
# request -> (value of the variable, or None for unset; torch deterministic flag)
REQUESTS: dict[str, tuple[str | None, bool]] = {
    "none": (None, False),
    "env": ("0", False),
    "torch_flag": (None, True),
    "both": ("0", True),
    "env_allow+torch_flag": ("1", True),
}


@dataclass(frozen=True)
class Row:
    activation: str
    request: str
    scale_bias: bool
    fc1_bias: bool
    unit_scale: bool

    @property
    def requested(self) -> bool:
        env, flag = REQUESTS[self.request]
        return env == "0" or flag

    @property
    def step(self) -> consumer.StepConfig:
        return consumer.StepConfig(
            activation=self.activation,
            fc1_bias=self.fc1_bias,
            scale_bias=self.scale_bias,
            unit_scale=self.unit_scale,
        )

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Row:
        return cls(*(record[k] for k in cls.__dataclass_fields__))

    def describe(self) -> str:
        shown = ", ".join(
            f"{k}={'on' if getattr(self, k) else 'off'}"
            for k in ("scale_bias", "fc1_bias", "unit_scale")
        )
        return f"{self.activation}, request={self.request}, {shown}"


def all_rows(activations: tuple[str, ...] = ACTIVATIONS) -> list[Row]:
    flags = (False, True)
    return [
        Row(a, r, sb, fb, us)
        for a, r, sb, fb, us in itertools.product(activations, REQUESTS, flags, flags, flags)
    ]


def expected_outcome(row: Row, support: consumer.KnobSupport) -> str:
    """The contract, stated on its own: what a correct consumer does with this row on this build."""
    if not row.requested or row.unit_scale:
        return "default"
    if not support.present:
        return "refuse"
    if row.fc1_bias and support.covers_dbias != "covered":
        return "refuse"
    if row.scale_bias:
        return "refuse"
    return "deterministic"


# ---------------------------------------------------------------- process state of one row


def torch_state() -> dict[str, Any]:
    """The variable and the torch flag as this process has them now."""
    return {
        "env": os.environ.get(consumer.ENV_VAR),
        "torch_deterministic": torch.are_deterministic_algorithms_enabled(),
        "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
    }


def restore(state: Mapping[str, Any]) -> None:
    """Put back the variable and the torch flag as ``torch_state`` read them."""
    if state["env"] is None:
        os.environ.pop(consumer.ENV_VAR, None)
    else:
        os.environ[consumer.ENV_VAR] = state["env"]
    torch.use_deterministic_algorithms(state["torch_deterministic"], warn_only=state["warn_only"])


@contextlib.contextmanager
def request_state(request: str) -> Iterator[dict[str, Any]]:
    """Set the variable and the torch flag (warn_only, so torch's own checks cannot raise first)."""
    env, flag = REQUESTS[request]
    saved = torch_state()
    try:
        if env is None:
            os.environ.pop(consumer.ENV_VAR, None)
        else:
            os.environ[consumer.ENV_VAR] = env
        if flag:
            torch.use_deterministic_algorithms(True, warn_only=True)
        else:
            torch.use_deterministic_algorithms(False)
        yield torch_state()
    finally:
        restore(saved)
