"""The determinism harness's defaults, in one place: the runner's settings (``FE_CI_REPEATS``,
``FE_CI_MAX_REPEATS``, ``FE_CI_LUCK_TARGET``, ``FE_CI_CONTROL_SHARE``), a pipeline run's options
and the determinism stage's parameters all start from these (``docs/determinism.md`` says what
each one decides). Standard library only: the stage reads them inside the candidate's environment,
from the private copy of the source it is given.
"""

from __future__ import annotations

REPEATS = 8  # the first pass of each arm, and the control's sample at each config of the walk
MAX_REPEATS = 64  # the run cap of the deterministic arm
LUCK_TARGET = 1e-3  # the deterministic arm runs until a nondeterministic kernel's luck is below
CONTROL_SHARE = 0.5  # the walk stops at the first config whose control varies in this share
