"""The refusals the frontend itself owes: entry points that must raise (or warn) where they cannot
honour a determinism request, as rows of the refusal stage beside the consumer's.

A row names the entry point and the knob it refuses (as discovery names them, so a discovered
knob maps to its row: ``core/surface.py``), the request, the families where the refusal is owed,
what must happen (``raises``: the exception type; ``warns``: a warning and a run), the release
that first owes it (read from the registry's wheels), and the oldest cuDNN backend it runs on.
``runner/inside/frontend_refusal.py`` runs the rows on a GPU of those families; on a host
without one a row is ``skipped`` with the reason, never a pass. Standard library only: the
candidate's refusal stage and the service's coverage both read it.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECK_PREFIX = "frontend_refusal"
# A refusal stage that ran only these rows (a lease's ``refusal_scope``): its consumer's rows are
# the CPU job's decisions, reused, and its check ``refusal.reused_decisions`` says so.
FRONTEND_ONLY = "frontend"
REUSED_CHECK = "refusal.reused_decisions"


@dataclass(frozen=True)
class FrontendRefusal:
    name: str  # the row: check ``frontend_refusal.<name>``
    entry_point: str  # dotted path, resolved in the build
    knob: str  # the knob as discovery names it ("deterministic", "torch flag")
    request: str  # what the row asks, in words
    families: tuple[str, ...]  # where the refusal is owed
    since: str  # the first release whose entry point owes it
    raises: str = ""  # the exception the call must raise ("" = it must run)
    warns: str = ""  # the warning a call that runs must give
    # What the exception's or warning's message must say (case-insensitive), so a ValueError of
    # bad inputs ("Q must live on CUDA") is never taken for the refusal.
    says: str = "deterministic"
    min_backend: str = ""  # the oldest cuDNN backend the call runs on ("" = any)
    why: str = ""
    # For a torch-flag row: the callable whose source must read the flag for the row to be owed
    # (1.28.0 has causal_conv1d, and no flag in its backward: nothing to refuse).
    flag_reader: str = ""

    @property
    def check(self) -> str:
        return f"{CHECK_PREFIX}.{self.name}"

    @property
    def expected(self) -> str:
        """``raise ValueError`` or ``warn RuntimeWarning and run``."""
        if self.raises:
            return f"raise {self.raises}"
        return f"warn {self.warns} and run" if self.warns else "run"


DSA = "cudnn.deepseek_sparse_attention"
CONV = "cudnn.ops.causal_conv1d.causal_conv1d"
CONV_READER = "cudnn.ops.causal_conv1d._run_causal_conv1d_bulk_backend"
CONV_BACKEND = "9.20.0"  # the H200's 9.19.0 has no cudnnCausalConv1dForward

FRONTEND_REFUSALS: tuple[FrontendRefusal, ...] = (
    FrontendRefusal(
        name="dsa_sparse_attention_bwd.deterministic",
        entry_point=f"{DSA}.sparse_attention_backward_wrapper",
        knob="deterministic",
        request="deterministic=True",
        families=("sm_80", "sm_90"),
        since="1.29.0",
        raises="ValueError",
        why="check_support: deterministic DSA backward requires SM100",
    ),
    FrontendRefusal(
        name="dsa_indexer_bwd.deterministic",
        entry_point=f"{DSA}.indexer_backward_wrapper",
        knob="deterministic",
        request="deterministic=True",
        families=("sm_80", "sm_90"),
        since="1.32.0",
        raises="ValueError",
        why="check_support: deterministic IndexerBackward requires an SM100-family capability",
    ),
    FrontendRefusal(
        name="causal_conv1d_bwd.bias_flag_on",
        entry_point=CONV,
        knob="torch flag",
        request="bias, torch.use_deterministic_algorithms(True)",
        families=("sm_90", "sm_100"),
        since="1.29.0",
        raises="RuntimeError",
        says="not deterministic",
        min_backend=CONV_BACKEND,
        flag_reader=CONV_READER,
        why="dbias accumulates with FP32 atomics: the flag cannot be honoured",
    ),
    FrontendRefusal(
        name="causal_conv1d_bwd.bias_flag_warn_only",
        entry_point=CONV,
        knob="torch flag",
        request="bias, torch.use_deterministic_algorithms(True, warn_only=True)",
        families=("sm_90", "sm_100"),
        since="1.29.0",
        warns="RuntimeWarning",
        says="not deterministic",
        min_backend=CONV_BACKEND,
        flag_reader=CONV_READER,
        why="warn_only turns the refusal into a warning, and the backward runs",
    ),
)

BY_NAME: dict[str, FrontendRefusal] = {r.name: r for r in FRONTEND_REFUSALS}


def rows_of(entry_point: str, knob: str) -> list[FrontendRefusal]:
    """The rows that cover a discovered knob: same callable by its last name, same knob."""
    last = entry_point.rsplit(".", 1)[-1]
    return [
        r for r in FRONTEND_REFUSALS if r.entry_point.rsplit(".", 1)[-1] == last and r.knob == knob
    ]
