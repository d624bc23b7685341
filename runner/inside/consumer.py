"""A reference consumer of the grouped-GEMM dactivation backward: bit-exact, or a refusal.

One fused grouped-MLP backward step, the way TransformerEngine's fused grouped MLP takes it: the
FC2 dactivation kernel with per-token probabilities (which produces dprob, the gradient of the
routing scale), optionally the FC1 bias gradient from the same kernel, and optionally an FC2 scale
bias whose own reduction adds to dprob. It implements the consumer contract of docs/architecture.md:

- determinism is requested when ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` or
  ``torch.are_deterministic_algorithms_enabled()``; the variable unset or ``1`` is no request;
- the ``deterministic`` knob is feature-detected on the wrapper itself, never from a version;
- the knob is passed as ``True`` or not at all;
- a request this build cannot honour raises one ``RuntimeError`` that says what to change;
- with a unit activation scale there is no dprob: no refusal and no knob.

Standard library, torch and the candidate (``cudnn``) only; runs in the candidate's environment.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from core import subjects

ENV_VAR = "NVTE_ALLOW_NONDETERMINISTIC_ALGO"
KNOB = "deterministic"


@dataclass(frozen=True)
class Wrapper:
    """The frontend entry point one activation's dactivation backward goes through."""

    activation: str
    name: str  # attribute of the ``cudnn`` package
    fixed_kwargs: Mapping[str, Any]
    # The releases whose wrapper takes the knob ("1.28.0 or later"), from the ledger, for the
    # refusal's advice only; never used to decide.
    knob_release: str
    subject: str = ""


# The registry says which subject serves which activation; the ledger when its knob shipped.
WRAPPERS: dict[str, Wrapper] = {
    activation: Wrapper(
        activation,
        s.entry_point.removeprefix("cudnn."),
        dict(s.fixed_kwargs),
        subjects.knob_release(s.name),
        s.name,
    )
    for activation, s in subjects.consumer_subjects().items()
}

# How the wrapper's documentation speaks of the knob and dbias. A clause that negates dbias
# ("no dbias", "does not cover dbias", "dbias is not ...") means the knob leaves it out.
_DBIAS = r"(?:dbias|bias gradients?)"
_DBIAS_RE = re.compile(rf"\b{_DBIAS}\b", re.IGNORECASE)
_DBIAS_NEGATED_RE = re.compile(
    rf"\b(?:no|not|without|except|excluding|never)\b[^.;:()]*?\b{_DBIAS}\b"
    rf"|\b{_DBIAS}\b[^.;:()]*?\b(?:not|never)\b",
    re.IGNORECASE,
)
_ARG_ENTRY_RE = re.compile(r"^(\s*)[A-Za-z_]\w*\s*(?:\([^)]*\))?\s*:(?:\s|$)")


@dataclass(frozen=True)
class KnobSupport:
    """What one build's wrapper offers, read from the wrapper itself."""

    importable: bool
    present: bool
    default: str | None = None  # repr of the knob's default, e.g. "None", "False"
    # "covered" | "not_covered" | "undocumented": whether the knob's documentation covers dbias.
    covers_dbias: str = "undocumented"
    error: str | None = None


@dataclass(frozen=True)
class StepConfig:
    """The shape of one backward step, as far as the determinism decision cares."""

    activation: str  # "srelu" | "swiglu"
    fc1_bias: bool = False
    scale_bias: bool = False
    unit_scale: bool = False


@dataclass(frozen=True)
class Decision:
    requested: bool
    pass_knob: bool
    refusal: str | None = None  # the RuntimeError's message when the request cannot be honoured


@dataclass
class StepOutput:
    decision: Decision
    dprob: torch.Tensor | None
    fc1_dbias: torch.Tensor | None
    scale_bias_grad: torch.Tensor | None
    raw: Any  # what the wrapper returned


def determinism_requested(environ: Mapping[str, str] | None = None) -> bool:
    """The two-knob request: the variable set to 0, or torch's deterministic-algorithms flag."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR, "1").strip() or "1"
    try:
        allow = int(value)
    except ValueError:
        raise RuntimeError(
            f"{ENV_VAR}={value!r} is not understood: set it to 0 to require deterministic "
            "algorithms or to 1 (or unset it) to allow nondeterministic ones"
        ) from None
    return allow == 0 or torch.are_deterministic_algorithms_enabled()


def resolve_wrapper(activation: str) -> Callable[..., Any]:
    """The activation's wrapper from the installed frontend; ImportError when there is none."""
    spec = WRAPPERS[activation]
    import cudnn

    fn = getattr(cudnn, spec.name, None)
    if fn is None:
        raise ImportError(f"cudnn has no {spec.name}")
    return fn


def detect_knob(fn: Callable[..., Any]) -> KnobSupport:
    """Whether ``fn`` takes ``deterministic`` by keyword, and whether its docs say dbias is covered.

    A signature that cannot be read (TypeError, ValueError) answers "no knob", not an error.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as exc:
        return KnobSupport(
            importable=True,
            present=False,
            error=f"signature unreadable: {type(exc).__name__}: {exc}",
        )
    param = params.get(KNOB)
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if param is None or param.kind not in keyword_kinds:
        return KnobSupport(importable=True, present=False)
    default = None if param.default is inspect.Parameter.empty else repr(param.default)
    return KnobSupport(
        importable=True,
        present=True,
        default=default,
        covers_dbias=dbias_coverage(inspect.getdoc(fn) or ""),
    )


def knob_support(activation: str) -> KnobSupport:
    try:
        fn = resolve_wrapper(activation)
    except ImportError as exc:
        return KnobSupport(importable=False, present=False, error=f"{type(exc).__name__}: {exc}")
    return detect_knob(fn)


def dbias_coverage(doc: str) -> str:
    """Read the knob's passage of a wrapper docstring: does its deterministic mode cover dbias?

    The passage is each line naming the knob plus its continuation, stopping at a blank line or at
    the next argument entry, so another argument that mentions dbias does not count.
    """
    passage = " ".join(_knob_passages(doc))
    if not _DBIAS_RE.search(passage):
        return "undocumented"
    if _DBIAS_NEGATED_RE.search(passage):
        return "not_covered"
    return "covered"


def _knob_passages(doc: str) -> list[str]:
    lines = doc.splitlines()
    knob_re = re.compile(rf"\b{KNOB}\b")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not knob_re.search(line):
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        chunk = [line.strip()]
        i += 1
        while i < len(lines) and lines[i].strip():
            entry = _ARG_ENTRY_RE.match(lines[i])
            if entry and len(entry.group(1)) <= indent:
                break
            chunk.append(lines[i].strip())
            i += 1
        out.append(" ".join(chunk))
    return out


def decide(step: StepConfig, support: KnobSupport, *, requested: bool) -> Decision:
    """The contract's decision for one step on one build (pure: no torch state, no imports)."""
    if not requested or step.unit_scale:
        return Decision(requested=requested, pass_knob=False)
    spec = WRAPPERS[step.activation]
    # Each problem with the ways out of it; every problem must be fixed.
    problems: list[tuple[str, list[str]]] = []
    if not support.present:
        why = "is not in this build" if not support.importable else "has no 'deterministic' knob"
        fixes = [
            f"install nvidia-cudnn-frontend {spec.knob_release}, whose "
            f"{spec.name} takes deterministic"
        ]
        if step.activation != "srelu":
            fixes.append("switch the activation to srelu")
        problems.append((f"cudnn.{spec.name} {why}", fixes))
    elif step.fc1_bias and support.covers_dbias != "covered":
        said = (
            "documents that it does not cover"
            if support.covers_dbias == "not_covered"
            else "does not document that it covers"
        )
        fixes = ["drop the FC1 bias"]
        if step.activation != "srelu":
            fixes.append("switch the activation to srelu")
        problems.append((f"the deterministic mode of cudnn.{spec.name} {said} dbias", fixes))
    if step.scale_bias:
        problems.append(
            (
                "the FC2 scale-bias reduction adds to dprob with nondeterministic atomics",
                ["drop the FC2 scale bias"],
            )
        )
    if not problems:
        return Decision(requested=True, pass_knob=True)
    what = "; ".join(p for p, _ in problems)
    how = "; and ".join(" or ".join(fixes) for _, fixes in problems)
    message = (
        f"deterministic algorithms were requested ({ENV_VAR}=0 or "
        f"torch.use_deterministic_algorithms(True)), but the {step.activation} grouped-MLP "
        f"backward cannot produce a bit-exact dprob with this build: {what}. "
        f"To run deterministically: {how}. Otherwise allow nondeterministic algorithms "
        f"({ENV_VAR}=1 and torch.use_deterministic_algorithms(False))."
    )
    return Decision(requested=True, pass_knob=False, refusal=message)


def backward_step(
    step: StepConfig,
    inputs: Mapping[str, Any],
    *,
    wrapper: Callable[..., Any] | None = None,
) -> StepOutput:
    """Run the step: decide, call the wrapper with the knob True or absent, add the scale bias.

    ``inputs`` holds the wrapper's data arguments by their wrapper names (``a_tensor``,
    ``b_tensor``, ``c_tensor``, ``sfa_tensor``, ``sfb_tensor``, ``padded_offsets``,
    ``alpha_tensor``, ``beta_tensor`` for dGLU, ``prob_tensor``), and for a scale bias also
    ``grad_output`` (tokens x hidden, high precision), ``scale_bias`` (experts x hidden) and
    ``token_expert`` (tokens, int64). ``wrapper`` defaults to the installed frontend's.
    Raises RuntimeError when determinism is requested and cannot be delivered.
    """
    spec = WRAPPERS[step.activation]
    requested = determinism_requested()
    if wrapper is None:
        try:
            wrapper = resolve_wrapper(step.activation)
        except ImportError as exc:
            support = KnobSupport(importable=False, present=False, error=str(exc))
            decision = decide(step, support, requested=requested)
            if decision.refusal:
                raise RuntimeError(decision.refusal) from exc
            raise
    decision = decide(step, detect_knob(wrapper), requested=requested)
    if decision.refusal:
        raise RuntimeError(decision.refusal)

    probs = None if step.unit_scale else inputs["prob_tensor"]
    dprob = None if probs is None else torch.zeros_like(probs, dtype=torch.float32)
    kwargs: dict[str, Any] = {
        name: inputs.get(name)
        for name in ("a_tensor", "b_tensor", "c_tensor", "sfa_tensor", "sfb_tensor")
    }
    kwargs.update(
        padded_offsets=inputs.get("padded_offsets"),
        alpha_tensor=inputs.get("alpha_tensor"),
        prob_tensor=probs,
        dprob_tensor=dprob,
        generate_dbias=step.fc1_bias,
        **spec.fixed_kwargs,
    )
    if "beta_tensor" in inputs:
        kwargs["beta_tensor"] = inputs["beta_tensor"]
    if decision.pass_knob:
        kwargs[KNOB] = True
    raw = wrapper(**kwargs)

    out_dprob = _get(raw, "dprob_tensor", dprob)
    scale_bias_grad = None
    if step.scale_bias:
        scale_bias_grad, dscale = _scale_bias_grads(inputs, probs)
        if out_dprob is not None and dscale is not None:
            out_dprob = out_dprob + dscale.reshape(out_dprob.shape).to(out_dprob.dtype)
    return StepOutput(
        decision=decision,
        dprob=out_dprob,
        fc1_dbias=_get(raw, "dbias_tensor", None) if step.fc1_bias else None,
        scale_bias_grad=scale_bias_grad,
        raw=raw,
    )


def _get(raw: Any, key: str, default: Any) -> Any:
    return raw.get(key, default) if isinstance(raw, Mapping) else default


def _scale_bias_grads(
    inputs: Mapping[str, Any], probs: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The FC2 scale bias's two gradients: its own, and its share of dprob.

    out = prob * (fc2(x) + bias[expert]) so d bias[e] = sum over e's tokens of prob * dy, and
    dprob gains dy . bias[expert]. The per-expert sum is an ``index_add_``, which accumulates with
    atomics on CUDA: this is the extra nondeterministic producer a request refuses.
    """
    dy: torch.Tensor = inputs["grad_output"]
    bias: torch.Tensor = inputs["scale_bias"]
    token_expert: torch.Tensor = inputs["token_expert"]
    weighted = dy if probs is None else dy * probs.reshape(-1, 1).to(dy.dtype)
    dbias = torch.zeros_like(bias).index_add_(0, token_expert, weighted.to(bias.dtype))
    dscale = None if probs is None else (dy * bias[token_expert].to(dy.dtype)).sum(dim=-1)
    return dbias, dscale
