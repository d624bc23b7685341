"""The subject registry: one entry per frontend entry point that has a determinism knob.

Standard library only: this module is imported both inside a candidate's environment (by the
probe and the suites) and by the runner and the service (to know which families cover a subject).
A new knob in a future frontend is one new entry here plus one module under ``subjects/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FAMILIES: tuple[str, ...] = ("sm_80", "sm_90", "sm_100")


@dataclass(frozen=True)
class Subject:
    name: str
    entry_point: (
        str  # dotted path from the ``cudnn`` package, e.g. "cudnn.flex_attention.flex_attn_func"
    )
    knob: str
    families: tuple[str, ...]
    outputs: tuple[str, ...]
    # How the knob is found: "signature" reads inspect.signature; "docstring" reads the first line
    # of a compiled pybind11 method's __doc__ (those have no readable signature).
    probe_method: str = "signature"
    # Extra keyword arguments the entry point needs for this subject (e.g. act_func="dswiglu").
    fixed_kwargs: dict[str, str] = field(default_factory=dict)
    note: str = ""


SUBJECTS: dict[str, Subject] = {
    s.name: s
    for s in (
        Subject(
            name="grouped_gemm_dsrelu",
            entry_point="cudnn.grouped_gemm_dsrelu_wrapper_sm100",
            knob="deterministic",
            families=("sm_100",),
            outputs=("dprob", "dbias"),
            note="default None follows torch.use_deterministic_algorithms",
        ),
        Subject(
            name="grouped_gemm_dglu",
            entry_point="cudnn.grouped_gemm_dglu_wrapper_sm100",
            knob="deterministic",
            families=("sm_100",),
            outputs=("dprob",),
            fixed_kwargs={"act_func": "dswiglu"},
            note="documented not to cover dbias",
        ),
        Subject(
            name="flex_attention_bwd",
            entry_point="cudnn.flex_attention.flex_attn_func",
            knob="deterministic",
            families=("sm_90", "sm_100"),
            outputs=("dq", "dk", "dv"),
        ),
        Subject(
            name="sdpa_bwd",
            entry_point="cudnn._compiled_module.backend_graph.sdpa_backward",
            knob="use_deterministic_algorithm",
            families=("sm_80", "sm_90", "sm_100"),
            outputs=("dq", "dk", "dv"),
            probe_method="docstring",
        ),
    )
}


def family_of(major: int, minor: int) -> str | None:
    """The architecture family of a compute capability, or None where no subject runs."""
    if major == 8:
        return "sm_80"
    if (major, minor) == (9, 0):
        return "sm_90"
    if (major, minor) in ((10, 0), (10, 3)):
        return "sm_100"
    return None


def subjects_for_family(family: str) -> list[Subject]:
    return [s for s in SUBJECTS.values() if family in s.families]
