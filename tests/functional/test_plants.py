"""The planted builds of the H200 stream (``testkit/plants.py``), on the real 1.32.0 wheel.

The edited ``cudnn/flex_attention/autograd.py`` is run for real through torch's autograd on CPU;
the attention kernels it calls (``_flex_attention_forward``/``_flex_attention_backward``) are
stand-ins, because the real ones need a CUDA GPU. What the test holds is what the plant does
around them: which bytes of which output change, and how often the backward runs.
"""

from __future__ import annotations

import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from testkit.plants import AUTOGRAD, PLANTS, plant
from testkit.registry import registry_wheel
from testkit.wheels import record_line


class Kernels:
    """The stand-in kernels: fixed gradients, and the knob of each backward call."""

    def __init__(self) -> None:
        self.backward_knobs: list[bool] = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **_kw: Any) -> tuple:
        return q.detach() * 1.5, torch.zeros(q.shape[:-1]), None

    def backward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_a: Any, **kw: Any):
        self.backward_knobs.append(kw["deterministic"])
        return q.detach() * 3, k.detach() * 5, v.detach() * 7


def load(source: bytes, kernels: Kernels, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    execution = types.ModuleType("cudnn.flex_attention.execution")
    execution._flex_attention_forward = kernels.forward  # type: ignore[attr-defined]
    execution._flex_attention_backward = kernels.backward  # type: ignore[attr-defined]
    mask_plan = types.ModuleType("cudnn.flex_attention.plan.mask_plan")
    mask_plan.MaskPlan = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cudnn.flex_attention.execution", execution)
    monkeypatch.setitem(sys.modules, "cudnn.flex_attention.plan.mask_plan", mask_plan)
    module = types.ModuleType("planted_autograd")
    exec(compile(source, AUTOGRAD, "exec"), module.__dict__)
    return module


def grads(module: types.ModuleType, deterministic: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 16, 4, 8, generator=gen).bfloat16() for _ in range(3))
    for t in (q, k, v):
        t.requires_grad_(True)
    out, _lse, _max = module.FlexAttnFunc.apply(q, k, v, None, None, deterministic, False, False)
    out.backward(torch.ones_like(out))
    return [t.grad.detach().clone() for t in (q, k, v)]


def bits_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    xor = a.view(torch.int16) ^ b.view(torch.int16)
    return sum(bin(int(x) & 0xFFFF).count("1") for x in xor.reshape(-1).tolist())


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    genuine = registry_wheel("1.32.0")
    out = {"genuine": zipfile.ZipFile(genuine).read(AUTOGRAD)}
    for kind in PLANTS:
        wheel = plant(genuine, kind, tmp_path_factory.mktemp(kind))
        assert wheel.name == genuine.name
        with zipfile.ZipFile(wheel) as zf:
            out[kind] = zf.read(AUTOGRAD)
            record = zf.read(next(n for n in zf.namelist() if n.endswith("RECORD"))).decode()
            assert record_line(AUTOGRAD, out[kind]) in record.splitlines()  # installable
    return out


def test_the_flipped_bit_changes_one_bit_of_the_deterministic_dq_only(
    sources: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    genuine = load(sources["genuine"], Kernels(), monkeypatch)
    planted = load(sources["flipped_bit"], Kernels(), monkeypatch)
    dq, dk, dv = grads(planted, deterministic=True)
    gq, gk, gv = grads(genuine, deterministic=True)
    assert bits_apart(dq, gq) == 1 and torch.equal(dk, gk) and torch.equal(dv, gv)
    assert float((dq.float() - gq.float()).abs().max()) < 0.1  # within the numerics tolerance
    assert torch.equal(grads(planted, deterministic=True)[0], dq)  # still deterministic
    for a, b in zip(grads(planted, False), grads(genuine, False), strict=True):
        assert bits_apart(a, b) == 0  # the control arm is the genuine one


def test_the_slower_backward_runs_the_deterministic_backward_eleven_times(
    sources: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    kernels = Kernels()
    planted = load(sources["slower_backward"], kernels, monkeypatch)
    genuine = load(sources["genuine"], Kernels(), monkeypatch)
    det = grads(planted, deterministic=True)
    assert kernels.backward_knobs == [True] * 11
    assert all(torch.equal(a, b) for a, b in zip(det, grads(genuine, True), strict=True))
    kernels.backward_knobs.clear()
    grads(planted, deterministic=False)
    assert kernels.backward_knobs == [False]


def test_an_unknown_plant_or_a_release_without_the_line_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown plant"):
        plant(registry_wheel("1.32.0"), "faster", tmp_path)
    with pytest.raises(ValueError, match="has no"):  # 1.27.0 has no flex attention
        plant(registry_wheel("1.27.0"), "flipped_bit", tmp_path / "old")
