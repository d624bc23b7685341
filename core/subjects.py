"""The subject registry: every subject, found by scanning one folder.

A subject is one frontend entry point with a determinism knob, declared once, in its own module
``runner/inside/subjects/<name>.py``: ``DECLARATION = Subject(...)`` says its entry point (and
the older homes of it a release may still use), the knob and how to read it, the families it runs
on, its configs, the outputs compared with their tolerances, its release history, whether its
kernels can be compiled without its GPU, and, for the grouped-MLP dactivation backwards, the
consumer's activation and TransformerEngine's class that gates it. The same module holds the
harness that runs it. This registry reads the declarations from the modules' source
(``core/declarations.py``), so the service and every reader here need neither torch nor the
candidate; ``ledger.json`` keeps only the history of the features that are no subject's knob.

Standard library only: this module is imported both inside a candidate's environment (by the
probe and the suites) and by the runner and the service. ``docs/adding-a-subject.md`` says how
to add a subject, and how ``FE_CI_EXTRA_SUBJECTS`` adds one from outside the folder (tests).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.declarations import SUBJECTS_DIR, DeclarationError, declaration_fields, modules

# The families where the refusal stage runs rows for real (the grouped-GEMM wrappers' own GPU, the
# determinism harness behind its ``deterministic`` rows). On every other family each row is an
# intercepted decision, the same as on a CPU: a build's GPU job of such a family reuses its CPU
# job's decisions instead of making them again.
HARNESS_REFUSAL_FAMILIES: tuple[str, ...] = ("sm_100",)
# The knob of a subject whose entry point follows torch.use_deterministic_algorithms.
TORCH_FLAG = "torch_flag"
# How a knob is read: a signature, a pybind11 docstring, or the source reading the torch flag.
PROBE_METHODS: tuple[str, ...] = ("signature", "docstring", TORCH_FLAG)
LEDGER_PATH = Path(__file__).with_name("ledger.json")
EXTRA_SUBJECTS_ENV = "FE_CI_EXTRA_SUBJECTS"


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


@dataclass(frozen=True)
class Subject:
    name: str
    entry_point: (
        str  # dotted path from the ``cudnn`` package, e.g. "cudnn.flex_attention.flex_attn_func"
    )
    knob: str
    families: tuple[str, ...]
    # The outputs compared, lower-case, each with its numerics bound
    # ``{"atol": A, "rtol": R}`` (elementwise ``|x - ref| <= A + R * |ref|``).
    outputs: Mapping[str, Mapping[str, float]]
    # How the knob is found: "signature" reads inspect.signature; "docstring" reads the first line
    # of a compiled pybind11 method's __doc__ (those have no readable signature); "torch_flag"
    # reads its source: the knob is TORCH_FLAG, present when it reads the torch flag. "" (the
    # default): "torch_flag" for the TORCH_FLAG knob, else "signature".
    probe_method: str = ""
    # Extra keyword arguments the entry point needs for this subject (e.g. act_func="dswiglu").
    fixed_kwargs: dict[str, str] = field(default_factory=dict)
    note: str = ""
    # Where older releases keep the entry point, tried in order after ``entry_point``.
    alternates: tuple[str, ...] = ()
    # The module with ``SUBJECT`` (and, if compile_only, ``compile_target``): set by the registry,
    # not declared: "" for a module of runner/inside/subjects/, the file's name for an extension's.
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
    # The knob's release history: ``since`` (the first release documented to have it),
    # ``missing_in`` (later releases that lacked it again), ``source``, ``evidence``; {} = none.
    history: Mapping[str, Any] = field(default_factory=dict)
    # The oldest cuDNN backend library the entry point runs on ("" = any): on an older one the
    # subject is skipped, "not covered: needs a newer cuDNN backend", never an error of the build.
    min_backend: str = ""
    # A torch-flag subject: the public call whose autograd backward the entry point is, for the
    # ledger's wording ("cudnn.sdpa_torch's backward already follows ...").
    backward_of: str = ""
    # Another subject (of the same folder) whose configs this one walks, instead of ``configs``.
    configs_from: str = ""

    def __post_init__(self) -> None:
        if not self.probe_method:
            object.__setattr__(self, "probe_method",
                               TORCH_FLAG if self.knob == TORCH_FLAG else "signature")  # fmt: skip
        if self.configs_from:
            object.__setattr__(self, "configs", _configs_of_file(self.name, self.configs_from,
                                                                 self.configs))  # fmt: skip
        for name in ("families", "alternates", "configs"):  # a list declared reads as a tuple
            object.__setattr__(self, name, tuple(tuple(v) if name == "configs" else v
                                                 for v in getattr(self, name)))  # fmt: skip
        for output, bound in self.outputs.items():
            if not isinstance(bound, Mapping) or set(bound) != {"atol", "rtol"}:
                raise ValueError(f"{self.name}: output {output!r} needs {{'atol': A, 'rtol': R}}")
        if not self.outputs or not self.families:
            raise ValueError(f"{self.name}: a subject compares at least one output on a family")
        if self.probe_method not in PROBE_METHODS:
            raise ValueError(f"{self.name}: probe_method {self.probe_method!r} is not one of "
                             f"{', '.join(PROBE_METHODS)}")  # fmt: skip
        if (self.probe_method == TORCH_FLAG) != (self.knob == TORCH_FLAG):
            raise ValueError(f"{self.name}: knob {TORCH_FLAG!r} goes with probe_method "
                             f"{TORCH_FLAG!r}, and only with it")  # fmt: skip
        if self.min_backend and backend_tuple(self.min_backend) is None:
            raise ValueError(f"{self.name}: min_backend {self.min_backend!r} is not a cuDNN "
                             "version such as '9.20.0'")  # fmt: skip

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
        return self.module or f"{PACKAGE}.{self.name}"

    @property
    def feature(self) -> str:
        """The ledger's id of this subject's knob."""
        return f"{self.name}.{self.knob}"

    def load(self) -> Any:
        """The harness object (``SUBJECT``) of the subject's module: the one place core reaches
        into the runner (``runner/inside/subjects/``), by name, called only inside a candidate's
        stage."""
        return importlib.import_module(self.module_name).SUBJECT


def _configs_of_file(name: str, other: str, own: Any) -> Any:
    """The configs subject ``other`` declares (read from its module's source), for ``name``."""
    if own:
        raise ValueError(f"{name}: configs_from={other!r} and configs of its own; one of them")
    try:
        fields = declaration_fields(SUBJECTS_DIR / f"{other}.py") if other.isidentifier() else None
    except DeclarationError:
        fields = None
    if not fields or not fields.get("configs") or fields.get("configs_from"):
        raise ValueError(f"{name}: configs_from={other!r} names no subject declaring configs")
    return fields["configs"]


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
        short = f"{s.backward_of}'s backward" if s.backward_of else short
        return Feature(
            id=s.feature,
            subject=s.name,
            entry_points=s.entry_points,
            detect={"method": "torch_flag"},
            has=s.has or f"{short} already follows torch.use_deterministic_algorithms",
            lacks=s.lacks or f"{short} does not read torch.are_deterministic_algorithms_enabled()",
        )
    return Feature(
        id=s.feature,
        subject=s.name,
        entry_points=s.entry_points,
        detect={"method": "parameter", "parameter": s.knob, "read": s.probe_method},
        has=s.has or f"{short} already takes '{s.knob}'",
        lacks=s.lacks or f"{short} has no '{s.knob}' parameter",
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


PACKAGE = "runner.inside.subjects"
# The families a GPU job may be made for, in the order they are listed (older first).
_FAMILY_ORDER = ("sm_80", "sm_90", "sm_100")


def read_subject(path: Path, module: str = "") -> Subject | None:
    """The subject ``path`` declares (its module named ``module``; "" = the folder's), or None."""
    fields = declaration_fields(path)
    if fields is None:
        return None
    try:
        subject = Subject(**fields, module=module)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"{path}: {exc}") from exc
    if subject.name != path.stem:
        raise DeclarationError(f"{path}: declares {subject.name!r}; a subject's file is its name")
    return subject


def extra_home(extra: str) -> Path:
    """The folder ``FE_CI_EXTRA_SUBJECTS`` puts on ``sys.path`` (and a stage must read): the
    folder it names, or the folder of the file it names."""
    where = Path(extra).resolve()
    return where.parent if where.is_file() else where


def declared(folder: Path = SUBJECTS_DIR, extra: str | None = None) -> dict[str, Subject]:
    """Every subject of ``folder``, then those of ``extra`` (``FE_CI_EXTRA_SUBJECTS``: a folder
    of subject modules or one such file, its folder put on ``sys.path`` so the harness imports
    by the file's name), in name order within each."""
    found = [s for p in modules(folder) if (s := read_subject(p))]
    if extra:
        where = Path(extra).resolve()
        if not where.exists():
            raise DeclarationError(f"{EXTRA_SUBJECTS_ENV}={extra!r}: no such file or folder")
        home = str(extra_home(extra))
        if home not in sys.path:
            sys.path.append(home)
        found += [s for p in modules(where) if (s := read_subject(p, module=p.stem))]
    subjects: dict[str, Subject] = {}
    for s in found:
        if s.name in subjects:
            raise DeclarationError(f"subject {s.name!r} is declared twice")
        subjects[s.name] = s
    return subjects


def families_of(subjects: Mapping[str, Subject]) -> tuple[str, ...]:
    """Every family some subject runs on, older first: those a GPU job may be made for."""
    found = {f for s in subjects.values() for f in s.families}
    known = [f for f in _FAMILY_ORDER if f in found]
    return (*known, *sorted(found - set(known)))


SUBJECTS: dict[str, Subject] = declared(extra=os.environ.get(EXTRA_SUBJECTS_ENV))
FAMILIES: tuple[str, ...] = families_of(SUBJECTS)

FEATURES: tuple[Feature, ...] = (
    *(knob_feature(s) for s in SUBJECTS.values()),
    *OTHER_FEATURES,
)


def release_history(path: Path = LEDGER_PATH) -> dict[str, dict[str, Any]]:
    """The release history by feature id (``since``, ``missing_in``, sources): each subject's
    knob from its declaration, the other features from ``ledger.json``."""
    with open(path) as fh:
        entries: list[dict[str, Any]] = json.load(fh)["features"]
    history = {e["id"]: e for e in entries}
    for s in SUBJECTS.values():
        if s.history:
            history[s.feature] = {"id": s.feature, **s.history}
    return history


def knob_release(name: str) -> str:
    """The releases whose entry point takes the subject's knob, for advice: "1.28.0 or later"."""
    entry = release_history().get(SUBJECTS[name].feature)
    if entry is None:
        return "a release"
    missing = entry.get("missing_in") or []
    gaps = f" (not {', '.join(missing)})" if missing else ""
    return f"{entry['since']} or later{gaps}"


def reuses_refusal(family: str | None) -> bool:
    """Whether a GPU job of ``family`` makes the same refusal decisions as the CPU job does."""
    return family is not None and family not in HARNESS_REFUSAL_FAMILIES


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
