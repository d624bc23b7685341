"""The subject registry: the one place that says everything about a subject.

One entry per frontend entry point that has a determinism knob: its entry point (and the older
homes of it a release may still use), the knob and how to read it, the families it runs on, the
outputs compared, the module that runs it (``subjects/<name>.py`` unless ``module`` says
otherwise), whether its kernels can be compiled without its GPU, and, for the grouped-MLP
dactivation backwards, the consumer's activation and TransformerEngine's class that gates it.
Every other part of the runner and the service reads these; ``ledger.json`` keeps only the
release history of each feature (from which release it is documented, and the sources).

Standard library only: this module is imported both inside a candidate's environment (by the
probe and the suites) and by the runner and the service. ``docs/adding-a-subject.md`` says how
to add a subject, and how ``FE_CI_EXTRA_SUBJECTS`` adds one without touching this file (tests).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

FAMILIES: tuple[str, ...] = ("sm_80", "sm_90", "sm_100")
# The knob of a subject whose entry point follows torch.use_deterministic_algorithms.
TORCH_FLAG = "torch_flag"
LEDGER_PATH = Path(__file__).with_name("ledger.json")
EXTRA_SUBJECTS_ENV = "FE_CI_EXTRA_SUBJECTS"


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
    # of a compiled pybind11 method's __doc__ (those have no readable signature); "torch_flag"
    # reads its source: the knob is TORCH_FLAG, present when it reads the torch flag.
    probe_method: str = "signature"
    # Extra keyword arguments the entry point needs for this subject (e.g. act_func="dswiglu").
    fixed_kwargs: dict[str, str] = field(default_factory=dict)
    note: str = ""
    # Where older releases keep the entry point, tried in order after ``entry_point``.
    alternates: tuple[str, ...] = ()
    # The module with ``SUBJECT`` (and, if compile_only, ``compile_target``); "" = subjects/<name>.
    module: str = ""
    # Whether the CuTe DSL can compile its sm_100a kernels on a host without such a GPU.
    compile_only: bool = False
    # The reference consumer's activation served by this entry point, and TransformerEngine's
    # grouped-MLP class whose gate decides it ("" where no consumer row covers the subject).
    activation: str = ""
    consumer_class: str = ""
    # What the version ledger says when the build has / lacks the knob ("" = the usual wording).
    has: str = ""
    lacks: str = ""
    # The input sizes its harness walks, small to large: ``(name, params)``, plain values only.
    # The service reads the names (a re-pin is checked against them); the harness builds its
    # inputs from the params (``runner.inside.subjects.base.configs_of``).
    configs: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    # The comparison point, when the subject declares one (a name in ``configs``); "" = chosen by
    # measuring, once per family: the first config whose control varied robustly.
    comparison: str = ""
    # The oldest cuDNN backend library the entry point runs on ("" = any): on an older one the
    # subject is skipped, "not covered: needs a newer cuDNN backend", never an error of the build.
    min_backend: str = ""

    @property
    def config_names(self) -> tuple[str, ...]:
        return tuple(name for name, _params in self.configs)

    @property
    def definition(self) -> str:
        """What a comparison point's series stands on: the knob, the outputs, the configs and
        the declared comparison point. A change to any of them starts a new series."""
        text = json.dumps(
            {
                "name": self.name,
                "knob": self.knob,
                "outputs": list(self.outputs),
                "fixed_kwargs": self.fixed_kwargs,
                "configs": [[name, dict(params)] for name, params in self.configs],
                "comparison": self.comparison,
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def entry_points(self) -> tuple[str, ...]:
        return (self.entry_point, *self.alternates)

    @property
    def module_name(self) -> str:
        return self.module or f"runner.inside.subjects.{self.name}"

    @property
    def feature(self) -> str:
        """The ledger's id of this subject's knob."""
        return f"{self.name}.{self.knob}"

    def load(self) -> Any:
        """The harness object (``SUBJECT``) of the subject's module."""
        return importlib.import_module(self.module_name).SUBJECT


@dataclass(frozen=True)
class Feature:
    """Something the probe detects on a build, whose release history the ledger keeps.

    ``detect`` is ``{"method": "parameter", "parameter": P, "read": "signature" | "docstring"}``
    (the entry point takes P) or ``{"method": "doc_pattern", "pattern": RE}`` (RE is found in the
    entry point's ``__doc__``). The first of ``entry_points`` this build has answers.
    """

    id: str
    subject: str
    entry_points: tuple[str, ...]
    detect: Mapping[str, str]
    has: str
    lacks: str
    mismatch_effect: str = ""
    predates_effect: str = ""


def knob_feature(s: Subject) -> Feature:
    short = s.entry_point.rsplit(".", 1)[-1]
    if s.probe_method == "torch_flag":
        return Feature(
            id=s.feature,
            subject=s.name,
            entry_points=s.entry_points,
            detect={"method": "torch_flag"},
            has=s.has or f"{short} already follows torch.use_deterministic_algorithms",
            lacks=s.lacks or f"{short} does not read the torch flag",
        )
    return Feature(
        id=s.feature,
        subject=s.name,
        entry_points=s.entry_points,
        detect={"method": "parameter", "parameter": s.knob, "read": s.probe_method},
        has=s.has or f"{short} already takes '{s.knob}'",
        lacks=s.lacks or f"{short} has no '{s.knob}' parameter",
    )


# MXFP8 grouped GEMMs: a fused grouped MLP's FC2 backward; every config spans at least two
# 256-wide N-tiles, and the seed's 16 experts x 1024 tokens at n=2048 is one of them.
GROUPED_GEMM_CONFIGS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("e4_t256_n512_k1024", {"experts": 4, "tokens": 256, "n": 512, "k": 1024}),
    ("e8_t1024_n2048_k1024", {"experts": 8, "tokens": 1024, "n": 2048, "k": 1024}),
    ("e16_t1024_n2048_k1024", {"experts": 16, "tokens": 1024, "n": 2048, "k": 1024}),
    ("e16_t2048_n4096_k1024", {"experts": 16, "tokens": 2048, "n": 4096, "k": 1024}),
)

BUILTIN_SUBJECTS: tuple[Subject, ...] = (
    Subject(
        name="grouped_gemm_dsrelu",
        entry_point="cudnn.grouped_gemm_dsrelu_wrapper_sm100",
        knob="deterministic",
        families=("sm_100",),
        outputs=("dprob", "dbias"),
        note="default None follows torch.use_deterministic_algorithms",
        compile_only=True,
        activation="srelu",
        consumer_class="GroupedMLP_CuTeGEMMUnary",
        configs=GROUPED_GEMM_CONFIGS,
    ),
    Subject(
        name="grouped_gemm_dglu",
        entry_point="cudnn.grouped_gemm_dglu_wrapper_sm100",
        knob="deterministic",
        families=("sm_100",),
        outputs=("dprob",),
        fixed_kwargs={"act_func": "dswiglu"},
        note="documented not to cover dbias",
        compile_only=True,
        activation="swiglu",
        consumer_class="GroupedMLP_CuTeGEMMGLU",
        configs=GROUPED_GEMM_CONFIGS,
    ),
    Subject(
        name="flex_attention_bwd",
        entry_point="cudnn.flex_attention.flex_attn_func",
        knob="deterministic",
        families=("sm_90", "sm_100"),
        outputs=("dq", "dk", "dv"),
        has="cudnn.flex_attention.flex_attn_func already takes 'deterministic'",
        lacks="the build has no cudnn.flex_attention.flex_attn_func taking 'deterministic'",
        # BSHD, bf16, causal. The middle one measured on an H200 (docs/determinism.md): knob
        # off, 6 of 7 differed.
        configs=(
            ("b1_s512_h8_d128_causal", {"b": 1, "s": 512, "h": 8, "d": 128}),
            ("b2_s2048_h16_d128_causal", {"b": 2, "s": 2048, "h": 16, "d": 128}),
            ("b4_s4096_h16_d128_causal", {"b": 4, "s": 4096, "h": 16, "d": 128}),
        ),
    ),
    Subject(
        name="sdpa_bwd",
        entry_point="cudnn._compiled_module.backend_graph.sdpa_backward",
        knob="use_deterministic_algorithm",
        families=("sm_80", "sm_90", "sm_100"),
        outputs=("dq", "dk", "dv"),
        probe_method="docstring",
        alternates=("cudnn._compiled_module.pygraph.sdpa_backward",),
        # Measured on an H200 (docs/determinism.md): the first never varied, the second
        # varied weakly, the larger ones strongly.
        configs=(
            ("b1_h8_s512_d64_causal", {"b": 1, "h": 8, "s": 512, "d": 64, "causal": True}),
            ("b4_h16_s2048_d128_causal", {"b": 4, "h": 16, "s": 2048, "d": 128, "causal": True}),
            ("b4_h16_s4096_d128_causal", {"b": 4, "h": 16, "s": 4096, "d": 128, "causal": True}),
            ("b8_h16_s4096_d128_causal", {"b": 8, "h": 16, "s": 4096, "d": 128, "causal": True}),
        ),
    ),
)

# The packed THD configs: ragged sequences (token counts per sequence), causal, padded LSE.
THD_SMALL = [128, 384, 256, 512]
THD_LARGE = [1024, 1536, 512, 2048]

TORCH_FLAG_SUBJECTS: tuple[Subject, ...] = (
    Subject(
        name="sdpa_torch_bwd",
        entry_point="cudnn.sdpa.fwd.torch_op._sdpa_backward",
        knob=TORCH_FLAG,
        probe_method="torch_flag",
        families=("sm_90", "sm_100"),
        outputs=("dq", "dk", "dv"),
        # 1.28.0's cudnn::sdpa op (cudnn.experimental.ops) has a backward that never reads the
        # flag: the probe finds it there and says the knob is absent.
        alternates=("cudnn.experimental.ops.sdpa._sdpa_backward",),
        note="cudnn.sdpa_torch's autograd backward; control: flag off, deterministic arm: flag "
        "on, its runs alternating with warn_only=True",
        has="cudnn.sdpa_torch's backward already follows torch.use_deterministic_algorithms",
        lacks="cudnn.sdpa_torch's backward does not read torch.are_deterministic_algorithms_"
        "enabled()",
        configs=(
            ("b1_h8_s512_d64_causal", {"layout": "bhsd", "b": 1, "h": 8, "s": 512, "d": 64}),
            ("thd_h8_d64_t1280_causal", {"layout": "thd", "lens": THD_SMALL, "h": 8, "d": 64}),
            ("thd_h16_d128_t5120_causal", {"layout": "thd", "lens": THD_LARGE, "h": 16, "d": 128}),
            ("b4_h16_s2048_d128_causal", {"layout": "bhsd", "b": 4, "h": 16, "s": 2048, "d": 128}),
            ("b4_h16_s4096_d128_causal", {"layout": "bhsd", "b": 4, "h": 16, "s": 4096, "d": 128}),
            ("b8_h16_s4096_d128_causal", {"layout": "bhsd", "b": 8, "h": 16, "s": 4096, "d": 128}),
        ),
    ),
    Subject(
        name="causal_conv1d_bwd",
        entry_point="cudnn.ops.causal_conv1d._run_causal_conv1d_bulk_backend",
        knob=TORCH_FLAG,
        probe_method="torch_flag",
        families=("sm_90", "sm_100"),
        outputs=("dx", "dweight"),
        note="cudnn.ops.causal_conv1d's autograd backward, bf16, width 4, SiLU, channel-last x, "
        "no bias; with a bias the flag must refuse (frontend refusal rows)",
        has="cudnn.ops.causal_conv1d's backward already follows torch.use_deterministic_algorithms",
        lacks="cudnn.ops.causal_conv1d's backward does not read torch.are_deterministic_"
        "algorithms_enabled()",
        # The H200's cuDNN 9.19.0 has no cudnnCausalConv1dForward (1.32.0 raises "Unable to find
        # symbol"); 9.20.0 is the lower bound that evidence allows, not a measured first release.
        min_backend="9.20.0",
        configs=(
            ("b2_t2048_d1024_w4_silu", {"b": 2, "t": 2048, "dim": 1024}),
            ("b4_t4096_d2048_w4_silu", {"b": 4, "t": 4096, "dim": 2048}),
            ("b4_t8192_d2048_w4_silu", {"b": 4, "t": 8192, "dim": 2048}),
        ),
    ),
)

# Features that are not a subject's knob but still tell a version's truth.
OTHER_FEATURES: tuple[Feature, ...] = (
    Feature(
        id="grouped_gemm_quant.optional_prob_tensor",
        subject="grouped_gemm_quant",
        entry_points=("cudnn.grouped_gemm_quant_wrapper_sm100",),
        detect={"method": "doc_pattern", "pattern": r"prob_tensor:\s+Optional\b"},
        has="grouped_gemm_quant_wrapper_sm100 already documents prob_tensor as optional",
        lacks="grouped_gemm_quant_wrapper_sm100 still requires prob_tensor",
        mismatch_effect="a consumer's version gate would pass prob_tensor=None and the call "
        "would fail with 'prob_tensor is required'",
        predates_effect="a consumer's version gate would still build a unit probability tensor "
        "it does not need",
    ),
)


def _extension() -> ModuleType | None:
    """The file named by ``FE_CI_EXTRA_SUBJECTS``, its folder put on ``sys.path`` (tests)."""
    path = os.environ.get(EXTRA_SUBJECTS_ENV)
    if not path:
        return None
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location("fe_ci_extra_subjects", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{EXTRA_SUBJECTS_ENV}={path!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_EXTRA = _extension()

SUBJECTS: dict[str, Subject] = {
    s.name: s
    for s in (
        *BUILTIN_SUBJECTS,
        *TORCH_FLAG_SUBJECTS,
        *(getattr(_EXTRA, "SUBJECTS", None) or ()),
    )
}

FEATURES: tuple[Feature, ...] = (
    *(knob_feature(s) for s in SUBJECTS.values()),
    *OTHER_FEATURES,
    *(getattr(_EXTRA, "FEATURES", None) or ()),
)


def release_history(path: Path = LEDGER_PATH) -> dict[str, dict[str, Any]]:
    """The ledger's release history by feature id: ``since``, ``missing_in``, sources."""
    with open(path) as fh:
        entries: list[dict[str, Any]] = json.load(fh)["features"]
    history = {e["id"]: e for e in entries}
    history.update({e["id"]: e for e in getattr(_EXTRA, "HISTORY", None) or ()})
    return history


def knob_release(name: str) -> str:
    """The releases whose entry point takes the subject's knob, for advice: "1.28.0 or later"."""
    entry = release_history().get(SUBJECTS[name].feature)
    if entry is None:
        return "a release"
    missing = entry.get("missing_in") or []
    gaps = f" (not {', '.join(missing)})" if missing else ""
    return f"{entry['since']} or later{gaps}"


def backend_tuple(version: str | None) -> tuple[int, ...] | None:
    """``"9.19.0"`` or ``"91900"`` (cudnn.backend_version()) as (9, 19, 0); None if unreadable."""
    text = (version or "").strip()
    if text.isdigit() and len(text) >= 5:  # MAJOR*10000 + MINOR*100 + PATCH
        n = int(text)
        return (n // 10000, n // 100 % 100, n % 100)
    parts = text.split(".")
    if not text or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def backend_too_old(subject: Subject, backend: str | None) -> str:
    """Why this cuDNN backend cannot run the subject ("" when it can, or cannot be told)."""
    need, have = backend_tuple(subject.min_backend), backend_tuple(backend)
    if not subject.min_backend or need is None or have is None or have >= need:
        return ""
    return (
        f"not covered: needs a newer cuDNN backend ({subject.name} needs >= "
        f"{subject.min_backend}, this host has {backend})"
    )


def family_of(major: int, minor: int) -> str | None:
    """The architecture family of a compute capability, or None where no subject runs."""
    if major == 8:
        return "sm_80"
    if (major, minor) == (9, 0):
        return "sm_90"
    if (major, minor) in ((10, 0), (10, 3)):
        return "sm_100"
    return None


def consumer_subjects() -> dict[str, Subject]:
    """The subjects the reference consumer serves, by activation, in registry order."""
    return {s.activation: s for s in SUBJECTS.values() if s.activation}
