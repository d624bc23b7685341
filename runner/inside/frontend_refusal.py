"""The frontend's own refusals, run: each row of ``core/frontend_refusals.py`` on this host.

A row's call is built here from the entry point's 1.32.0 API (read from the wheel's sources; the
same calls as ``bench/gpu_surface_more.py``) and made once under its request. ``pass``: it raised
the exception the row names, or warned and ran; ``fail``: it ran where it had to refuse, or ran
without the warning; ``error``: it raised something else, so the refusal was not seen. A row is
``not_applicable`` where the build has no such entry point or knob, and ``skipped`` (with the
reason, never a pass) on a host without a GPU of the row's families or with a cuDNN backend older
than the row needs. The torch flag is set around a call and restored after it, raise or not.
Standard library, torch and the candidate only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from core.frontend_refusals import FRONTEND_REFUSALS, FrontendRefusal
from core.subjects import backend_tuple
from runner.inside.documents import CheckDoc
from runner.inside.introspect import Absent, ImportFailed, describe, read_parameters, resolve
from runner.inside.torchflag import flag

SEED = 20261207
Call = Callable[[], object]


def _randn(device: torch.device, *shape: int, seed: int, dtype: Any = torch.bfloat16) -> Any:
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=gen, device=device).to(dtype)


def _dsa_sparse(device: torch.device) -> Call:
    from cudnn.deepseek_sparse_attention import sparse_attention_backward_wrapper

    s_q, s_kv, h, topk = 256, 2048, 16, 256
    q, kv = _randn(device, s_q, h, 576, seed=SEED), _randn(device, s_kv, 576, seed=SEED + 1)
    out, dout = (_randn(device, s_q, h, 512, seed=SEED + i) for i in (2, 3))
    lse = torch.full((s_q, h), 6.0, dtype=torch.float32, device=device)
    sink = _randn(device, h, seed=SEED + 4, dtype=torch.float32)
    gen = torch.Generator(device=device).manual_seed(SEED)
    idx = torch.rand(s_q, s_kv, generator=gen, device=device).argsort(dim=1)[:, :topk]
    idx = idx.to(torch.int32).contiguous()
    return lambda: sparse_attention_backward_wrapper(
        q, kv, out, dout, lse, sink, idx, deterministic=True
    )


def _dsa_indexer(device: torch.device) -> Call:
    from cudnn.deepseek_sparse_attention import indexer_backward_wrapper

    b, sq, sk, h, d, k = 1, 256, 2048, 32, 128, 256
    iq, w = _randn(device, b, sq, h, d, seed=SEED + 5), _randn(device, b, sq, h, seed=SEED + 6)
    ik = _randn(device, b, sk, d, seed=SEED + 7)
    scores = [_randn(device, b, sq, k, seed=SEED + i, dtype=torch.float32) for i in (8, 9)]
    attn, index = (torch.softmax(s, dim=-1) for s in scores)
    gen = torch.Generator(device=device).manual_seed(SEED)
    top = torch.rand(b, sq, sk, generator=gen, device=device).argsort(dim=2)[..., :k]
    top = top.to(torch.int32).contiguous()
    grad_loss = torch.ones(1, dtype=torch.float32, device=device)
    return lambda: indexer_backward_wrapper(
        iq, w, ik, attn.clone(), index, top, grad_loss, deterministic=True
    )


def _conv_with_bias(device: torch.device) -> Call:
    from cudnn.ops.causal_conv1d import causal_conv1d

    b, t, dim = 2, 2048, 1024
    x = _randn(device, b, t, dim, seed=SEED).requires_grad_()
    w = _randn(device, dim, 4, seed=SEED + 1).requires_grad_()
    bias = _randn(device, dim, seed=SEED + 2).requires_grad_()
    dy = _randn(device, b, dim, t, seed=SEED + 3)

    def call() -> object:
        causal_conv1d(x.transpose(1, 2), w, bias, activation="silu").backward(dy)
        return None

    return call


CALLS: dict[str, tuple[Callable[[torch.device], Call], str]] = {
    # row -> (its call's builder, the torch flag mode it runs under)
    "dsa_sparse_attention_bwd.deterministic": (_dsa_sparse, "off"),
    "dsa_indexer_bwd.deterministic": (_dsa_indexer, "off"),
    "causal_conv1d_bwd.bias_flag_on": (_conv_with_bias, "on"),
    "causal_conv1d_bwd.bias_flag_warn_only": (_conv_with_bias, "warn_only"),
}


def not_run(row: FrontendRefusal, device: torch.device | None, family: str | None,
            backend: str | None) -> tuple[str, str]:  # fmt: skip
    """("", "") when the row runs here, else its status and reason."""
    present, why = present_in_build(row)
    if present is None:
        return "skipped", why
    if not present:
        return "not_applicable", f"{why}: nothing to refuse (owed from {row.since})"
    owed = " or ".join(row.families)
    if device is None:
        return "skipped", f"no CUDA GPU on this host: the refusal is owed on {owed}"
    if family not in row.families:
        return "skipped", f"owed on {owed}, not on {family or 'this GPU'}"
    need, have = backend_tuple(row.min_backend), backend_tuple(backend)
    if need is not None and have is not None and have < need:
        return "skipped", (
            f"not covered: needs a newer cuDNN backend (>= {row.min_backend}, this host has "
            f"{backend})"
        )
    return "", ""


def present_in_build(row: FrontendRefusal) -> tuple[bool | None, str]:
    """Whether this build has the row's entry point (and, for a parameter, the knob on it);
    None when the build has it but it does not import here (a dependency this host lacks)."""
    try:
        obj = resolve(row.entry_point)
    except Absent as exc:
        return False, f"{row.entry_point} is not in this build ({describe(exc.cause)})"
    except ImportFailed as exc:
        return None, f"{row.entry_point} did not import here: {describe(exc.cause)[:300]}"
    if row.flag_reader:  # the flag is read below the public function: there, or not owed
        try:
            params, _ = read_parameters(resolve(row.flag_reader), "torch_flag")
        except Absent:
            params = {}
        except ImportFailed as exc:
            return None, f"{row.flag_reader} did not import here: {describe(exc.cause)[:300]}"
        if not params:
            return False, f"{row.flag_reader} does not read the torch flag in this build"
        return True, ""
    params, _ = read_parameters(obj, "signature")
    if params is None or row.knob not in params:
        return False, f"{row.entry_point} has no '{row.knob}'"
    return True, ""


def judge(row: FrontendRefusal, call: Call, mode: str) -> tuple[str, str]:
    """Make the call once under the torch flag ``mode``: (status, detail) as the row expects."""
    with warnings.catch_warnings(record=True) as seen, flag(mode):
        warnings.simplefilter("always")
        try:
            call()
        except Exception as exc:  # the candidate's call: any exception is an observation
            said = describe(exc)[:500]
            if row.raises and type(exc).__name__ == row.raises and _says(row, str(exc)):
                return "pass", f"raised as owed: {said}"
            return "error", f"expected {row.expected} saying {row.says!r}; the call raised {said}"
    if row.raises:
        return "fail", f"{row.request} ran: the frontend owed {row.raises} ({row.why})"
    warned = [w for w in seen if w.category.__name__ == row.warns and _says(row, str(w.message))]
    if row.warns and not warned:
        return "fail", f"{row.request} ran without a {row.warns} saying {row.says!r}"
    return "pass", f"ran with {row.warns}: {str(warned[0].message)[:300]}" if warned else "ran"


def _says(row: FrontendRefusal, message: str) -> bool:
    return row.says.lower() in message.lower()


def checks(device: torch.device | None, family: str | None, backend: str | None) -> list[CheckDoc]:
    """One check per row: ``frontend_refusal.<row>``, with what was expected and seen."""
    out: list[CheckDoc] = []
    for row in FRONTEND_REFUSALS:
        status, detail = not_run(row, device, family, backend)
        if not status:
            assert device is not None
            build, mode = CALLS[row.name]
            try:
                call = build(device)
            except Exception as exc:  # inputs the build's API does not take
                status, detail = "error", f"could not set the call up: {describe(exc)[:500]}"
            else:
                status, detail = judge(row, call, mode)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        metrics = {
            "entry_point": row.entry_point,
            "knob": row.knob,
            "request": row.request,
            "expected": row.expected,
            "families": list(row.families),
            "since": row.since,
        }
        out.append({"name": row.check, "status": status, "detail": detail, "metrics": metrics})
    return out
