"""Planted builds: a real frontend wheel with one thing changed in ``flex_attention_bwd``'s
deterministic backward, for the stream of builds that proves the comparisons
(``bench/gpu_stream.py``). The knob-off path (the control arm) is left as it is in both.

- ``flipped_bit``: the deterministic backward's dq has the lowest bit of its first element
  flipped. Still deterministic and within the numerics tolerance (one bf16 ulp), but not the
  genuine bytes: a build after a genuine one must say ``deterministic_bits_changed``.
- ``slower_backward``: the deterministic backward runs eleven times (the first ten results are
  dropped). At the flex pin a run (forward and backward through autograd) takes about 1.4 ms on
  the H200, mostly host-side work, and each extra backward adds about 0.15 ms: run four times it
  measured only 1.22x and 1.35x the control's (genuine 0.94-1.15x), inside the noise band. Eleven
  times puts the deterministic arm at about twice the control's, a slowdown of the size the cost
  gate must catch every time.

Both edit ``cudnn/flex_attention/autograd.py`` at the line that unpacks the backward's result
(1.29.0 and later); ``doctor_wheel`` refuses a release where the line is not there.
"""

from __future__ import annotations

from pathlib import Path

from testkit.registry import doctor_wheel

AUTOGRAD = "cudnn/flex_attention/autograd.py"
ANCHOR = b"        dq, dk, dv = result\n"

FLIP = b"""\
        if ctx.deterministic:  # planted: one bit of the deterministic dq flipped
            dq = dq.contiguous().clone()
            dq.view(-1)[:1].view(torch.int16).bitwise_xor_(1)
"""
SLOWER = b"""\
        for _ in range(10) if ctx.deterministic else ():  # planted: it runs 11 times
            result = _flex_attention_backward(
                q,
                k,
                v,
                out,
                dout,
                lse,
                mask_plan=ctx.mask_plan,
                softmax_scale=ctx.softmax_scale,
                deterministic=True,
                dlse_tensor=dlse if ctx.return_lse else None,
            )
"""

PLANTS: dict[str, str] = {
    "flipped_bit": "flex_attention_bwd's deterministic dq has one bit flipped (bits must change)",
    "slower_backward": (
        "flex_attention_bwd's deterministic backward runs eleven times (cost must regress)"
    ),
}


def _edit(kind: str, source: bytes) -> bytes:
    if source.count(ANCHOR) != 1:
        raise ValueError(f"{AUTOGRAD}: the line {ANCHOR!r} is not there once")
    if kind == "flipped_bit":
        return source.replace(ANCHOR, ANCHOR + FLIP)
    if kind == "slower_backward":
        return source.replace(ANCHOR, SLOWER + ANCHOR)
    raise ValueError(f"unknown plant {kind!r}; plants: {', '.join(PLANTS)}")


def plant(src: Path, kind: str, dest_dir: Path) -> Path:
    """A copy of the wheel ``src`` in ``dest_dir`` with the plant ``kind``."""
    if kind not in PLANTS:
        raise ValueError(f"unknown plant {kind!r}; plants: {', '.join(PLANTS)}")
    return doctor_wheel(src, dest_dir, {AUTOGRAD: lambda data: _edit(kind, data)})
