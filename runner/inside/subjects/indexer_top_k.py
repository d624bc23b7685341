"""``indexer_top_k``: DeepSeek sparse attention's top-k selection, ``deterministic`` on and off.

``cudnn.deepseek_sparse_attention.indexer_top_k_wrapper(values, seq_lens, top_k, deterministic=)``
picks each row's ``top_k`` largest values with a CuTe DSL radix kernel (sm_90 and newer). Under
ties at the cut-off the choice is arbitrary with the knob off; with it on, the 1.32.0 docstring
says, the smaller column index wins and each row's indices come back in ascending order. So the
inputs are built with heavy ties (a few distinct levels over thousands of columns, every row full
length), and the bytes compared are the returned indices (and values). The reference is that
documented order: per row, a stable descending sort (ties keep column order), its first
``top_k`` columns, ascending.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.subjects import Subject
from runner.inside.subjects.base import Harness, Prepared, configs_of, seeded, tolerances_of

DECLARATION = Subject(
    name="indexer_top_k",
    entry_point="cudnn.deepseek_sparse_attention.indexer_top_k_wrapper",
    knob="deterministic",
    families=("sm_90", "sm_100"),
    # integers and copied input values: any difference is at least 1
    outputs={"indices": {"atol": 0.5, "rtol": 0.0}, "values": {"atol": 0.5, "rtol": 0.0}},
    note="output order under ties at the cut-off; the knob picks the smaller column index and "
    "returns each row's indices ascending",
    # rows x columns, float32 values drawn from `levels` integers: thousands of ties a level
    configs=(
        ("rows64_cols8192_topk512_l8", {"rows": 64, "cols": 8192, "top_k": 512, "levels": 8}),
        ("rows256_cols32768_topk2048_l8", {"rows": 256, "cols": 32768, "top_k": 2048, "levels": 8}),
        (
            "rows1024_cols65536_topk2048_l4",
            {"rows": 1024, "cols": 65536, "top_k": 2048, "levels": 4},
        ),
    ),
    history={
        "since": "1.32.0",
        "source": "registry wheels",
        "evidence": "indexer_top_k_wrapper absent before 1.32.0's deterministic parameter "
        "(core/surface_ledger.json: no top-k wrapper knob but indexer_forward_top_k_wrapper's in "
        "1.28.0-1.31.0); 1.32.0: deterministic: bool = False, documented to prefer smaller "
        "indices under ties and return them ascending",
    },
)

CONFIGS = configs_of(DECLARATION)
TOLERANCES = tolerances_of(DECLARATION)


def tied_values(params: dict, device: torch.device, seed: int = 20261205) -> torch.Tensor:
    """``[rows, cols]`` float32 drawn from ``levels`` integers: heavy ties at every cut-off."""
    gen = seeded(seed, device)
    shape = (params["rows"], params["cols"])
    return torch.randint(0, params["levels"], shape, generator=gen, device=device).float()


def top_k_reference(values: torch.Tensor, top_k: int) -> dict[str, torch.Tensor]:
    """The documented deterministic answer: per row the ``top_k`` largest, ties to the smaller
    column, indices ascending, and the values at them."""
    order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :top_k]
    indices = order.sort(dim=1).values
    return {"indices": indices.to(torch.int32), "values": values.gather(1, indices)}


@dataclass
class TopKWorkload(Prepared):
    def __post_init__(self) -> None:
        from cudnn.deepseek_sparse_attention import indexer_top_k_wrapper

        self.fn = indexer_top_k_wrapper
        self.values = tied_values(self.config.params, self.device)
        rows, cols = self.values.shape
        self.seq_lens = torch.full((rows,), cols, dtype=torch.int32, device=self.device)

    def run(self, knob: bool) -> dict[str, torch.Tensor]:
        top_k = self.config.params["top_k"]
        out = self.fn(self.values, self.seq_lens, top_k, deterministic=knob)
        return {"indices": out["indices"], "values": out["values"]}

    def reference(self) -> dict[str, torch.Tensor]:
        return top_k_reference(self.values, self.config.params["top_k"])


SUBJECT = Harness(DECLARATION, TopKWorkload)
