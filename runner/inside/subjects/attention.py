"""What the attention subjects share: their float32 references and the packed (THD) layout.

``attention_reference`` is the backward of ``softmax(scale * Q K^T + bias) V`` written out in
float32, for dense BHSD inputs, grouped-query K and V (fewer heads than Q) and an additive bias;
``packed_reference`` is the same for ragged sequences packed as ``[T, H, D]``, each sequence on
its own. ``shapes`` and ``cu_seqlens`` read a config's layout. Standard library and torch only;
no module here declares a subject.
"""

from __future__ import annotations

import math
from typing import Any

import torch

NAMES = ("dq", "dk", "dv")


def shapes(params: dict[str, Any]) -> tuple[tuple[int, ...], list[int] | None]:
    """The shape of Q and dO ([B, H, S, D] dense, [T, H, D] packed) and the THD lengths."""
    if params.get("layout") == "thd":
        lens = [int(n) for n in params["lens"]]
        return (sum(lens), params["h"], params["d"]), lens
    return (params["b"], params["h"], params["s"], params["d"]), None


def kv_heads(params: dict[str, Any]) -> int:
    """K's and V's heads: ``h_kv`` where the config is grouped-query, else Q's."""
    h_kv = int(params.get("h_kv") or params["h"])
    if params["h"] % h_kv:
        raise ValueError(f"h={params['h']} is not a multiple of h_kv={h_kv}")
    return h_kv


def cu_seqlens(lens: list[int], device: torch.device) -> torch.Tensor:
    """[0, l0, l0 + l1, ...] as int32: the offsets of the packed sequences."""
    offsets = [0]
    for n in lens:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_o: torch.Tensor,
    *,
    causal: bool,
    scale: float,
    bias: torch.Tensor | None = None,
    heads_per_chunk: int = 8,
) -> dict[str, torch.Tensor]:
    """dQ, dK, dV (and ``dbias`` with a bias) of softmax(scale * Q K^T + bias) V in float32,
    layout [B, H, S, D], a batch and a few heads at a time. K and V may have fewer heads (query
    head i reads K/V head i // (H / H_kv)); ``bias`` is [1 or B, H, S_q, S_k]."""
    b, h, s_q, _ = q.shape
    h_kv, s_k = k.shape[1], k.shape[2]
    group = h // h_kv
    grads = {name: torch.zeros(t.shape, dtype=torch.float32, device=t.device) for name, t in
             (("dq", q), ("dk", k), ("dv", v))}  # fmt: skip
    if bias is not None:
        grads["dbias"] = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
    mask = None
    if causal:
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1)
    for bi in range(b):
        for lo in range(0, h, heads_per_chunk):
            hi = min(lo + heads_per_chunk, h)
            kv = torch.arange(lo, hi, device=q.device) // group
            qc, doc = q[bi, lo:hi].float(), d_o[bi, lo:hi].float()
            kc, vc = k[bi, kv].float(), v[bi, kv].float()
            scores = scale * qc @ kc.transpose(1, 2)
            bb = bi if bias is not None and bias.shape[0] > 1 else 0
            if bias is not None:
                scores = scores + bias[bb, lo:hi].float()
            if mask is not None:
                scores.masked_fill_(mask, -math.inf)
            p = torch.softmax(scores, dim=-1)
            o = p @ vc
            dp = doc @ vc.transpose(1, 2)
            ds = p * (dp - (doc * o).sum(dim=-1, keepdim=True))
            grads["dq"][bi, lo:hi] = scale * ds @ kc
            grads["dk"][bi].index_add_(0, kv, scale * ds.transpose(1, 2) @ qc)
            grads["dv"][bi].index_add_(0, kv, p.transpose(1, 2) @ doc)
            if bias is not None:
                grads["dbias"][bb, lo:hi] += ds
    return grads


def packed_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_o: torch.Tensor,
    lens: list[int],
    *,
    scale: float,
) -> dict[str, torch.Tensor]:
    """dQ, dK, dV of causal attention over packed ``[T, H, D]`` sequences, each on its own."""
    parts: dict[str, list[torch.Tensor]] = {n: [] for n in NAMES}
    start = 0
    for n in lens:  # each sequence alone, [T, H, D] -> [1, H, T, D]
        one = [t[start : start + n].transpose(0, 1).unsqueeze(0) for t in (q, k, v, d_o)]
        grads = attention_reference(*one, causal=True, scale=scale)
        for name in NAMES:
            parts[name].append(grads[name][0].transpose(0, 1))
        start += n
    return {name: torch.cat(parts[name]) for name in NAMES}


def packed_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int], *, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention's output over packed ``[T, H, D]`` sequences (Q's dtype) and its softmax
    statistics, the natural-log sum of exponentials of each query's scaled scores, padded to
    ``[B, H, max(lens), 1]`` float32: what a backward graph takes as O and Stats."""
    o = torch.empty_like(q)
    stats = torch.zeros(len(lens), q.shape[1], max(lens), 1, dtype=torch.float32, device=q.device)
    start = 0
    for bi, n in enumerate(lens):
        qs, ks, vs = (t[start : start + n].transpose(0, 1).float() for t in (q, k, v))
        scores = scale * qs @ ks.transpose(1, 2)
        scores.masked_fill_(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
        stats[bi, :, :n, 0] = torch.logsumexp(scores, dim=-1)
        o[start : start + n] = (torch.softmax(scores, dim=-1) @ vs).transpose(0, 1).to(q.dtype)
        start += n
    return o, stats
