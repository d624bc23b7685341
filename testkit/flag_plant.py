"""A planted build of a real bug's size: ``cudnn.sdpa_torch``'s dense backward stops passing the
torch flag (cudnn-frontend #837, caught in review, not by a test).

The ``cudnn::sdpa_fwd`` torch op's autograd backward (``_sdpa_backward`` in
``cudnn/sdpa/fwd/torch_op.py``, 1.29.0 and later) calls ``torch.ops.cudnn.sdpa_bwd`` twice: on the
dense path and on the packed THD one, each with
``is_deterministic=torch.are_deterministic_algorithms_enabled()``. The plant deletes that one
keyword line from the dense call, found by reading the wheel's own source (``ast``), so the op
falls back to its default ``is_deterministic=False`` there while the THD path still reads the
flag; RECORD is rewritten to match (``testkit.registry.doctor_wheel``). A release where the line
is not there once is refused, never planted with nothing.

What catches it: the determinism stage on a GPU (``sdpa_torch_bwd``'s deterministic arm runs with
the flag on and its dense dq then varies, as the control does); the probe's ``torch_flag`` method
does not, since the backward still reads the flag on its THD path (docs/determinism.md).

    .venv/bin/python -m testkit.flag_plant [--version 1.32.0 | --wheel W] --out DIR [--provider]

``--provider`` plants the same bug in ``cudnn.torch``'s SDPA backward instead
(``plant_dropped_provider_flag``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from pathlib import Path

from testkit.registry import doctor_wheel, registry_wheel

TORCH_OP = "cudnn/sdpa/fwd/torch_op.py"
BACKWARD = "_sdpa_backward"
KNOB = "is_deterministic"
FLAG = "torch.are_deterministic_algorithms_enabled()"
PACKED_ONLY = "cu_seqlens_q"  # a keyword only the THD call passes
DROPPED_FLAG = "sdpa_torch's dense backward no longer passes the torch flag (#837)"
SUBJECT = "sdpa_torch_bwd"


def flag_line(source: bytes, where: str, function: str, what: str, skip: str = "") -> int:
    """The 1-based number of the one line of top-level ``function`` that passes the flag to a
    ``*sdpa_bwd`` call (``what``, for the error), leaving out calls that pass keyword ``skip``."""
    tree = ast.parse(source)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if len(found) != 1:
        raise ValueError(f"{where}: no single {function}()")
    lines: list[int] = []
    for call in ast.walk(found[0]):
        if not (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("sdpa_bwd")):
            continue
        names = {kw.arg for kw in call.keywords}
        for kw in call.keywords:
            if kw.arg == KNOB and skip not in names and ast.unparse(kw.value) == FLAG:
                if kw.end_lineno != kw.lineno:
                    raise ValueError(f"{where}:{kw.lineno}: the keyword spans lines")
                lines.append(kw.lineno)
    if len(lines) != 1:
        raise ValueError(f"{where}: {len(lines)} {what} pass {KNOB}={FLAG}; need one")
    return lines[0]


def dense_flag_line(source: bytes) -> int:
    """The 1-based number of the line that passes the flag to the dense call of the backward."""
    return flag_line(source, TORCH_OP, BACKWARD, "dense calls", skip=PACKED_ONLY)


def drop_dense_flag(source: bytes) -> bytes:
    """``source`` without the dense call's ``is_deterministic=`` line (and nothing else)."""
    return drop_line(source, dense_flag_line(source), f"{KNOB}={FLAG},", TORCH_OP)


def drop_line(source: bytes, number: int, holds: str, where: str) -> bytes:
    """``source`` without its line ``number`` (1-based), which must hold ``holds`` alone."""
    lines = source.splitlines(keepends=True)
    line = lines[number - 1].decode()
    if line.strip() != holds:
        raise ValueError(f"{where}:{number}: {line.strip()!r} holds more than the keyword")
    return b"".join(lines[: number - 1] + lines[number:])


PROVIDER = "cudnn/torch/sdpa_provider.py"
PROVIDER_BACKWARD = "_bwd"
DROPPED_PROVIDER_FLAG = "cudnn.torch's SDPA backward no longer passes the torch flag"
PROVIDER_SUBJECT = "sdpa_provider_bwd"


def provider_flag_line(source: bytes) -> int:
    """The 1-based number of the line of ``cudnn.torch.sdpa_provider._bwd`` (1.29.0 on) that
    passes the flag to ``torch.ops.cudnn.sdpa_bwd``; the varlen backward's is left alone."""
    return flag_line(source, PROVIDER, PROVIDER_BACKWARD, "calls")


def drop_provider_flag(source: bytes) -> bytes:
    """``source`` without ``_bwd``'s ``is_deterministic=`` line (and nothing else)."""
    return drop_line(source, provider_flag_line(source), f"{KNOB}={FLAG},", PROVIDER)


def plant_dropped_provider_flag(src: Path, dest_dir: Path) -> Path:
    """A copy of the wheel ``src`` in ``dest_dir`` whose ``cudnn.torch`` SDPA backward (what a
    plain ``F.scaled_dot_product_attention`` runs after ``cudnn.torch.install()``) drops the flag:
    #837's bug in the provider, which then runs with ``is_deterministic=False`` whatever the
    flag says. Caught by ``sdpa_provider_bwd`` on a GPU; the probe still sees the flag read in
    the varlen backward."""
    return doctor_wheel(src, dest_dir, {PROVIDER: drop_provider_flag})


def plant_dropped_flag(src: Path, dest_dir: Path) -> Path:
    """A copy of the wheel ``src`` in ``dest_dir`` (same name) with the #837 bug planted."""
    return doctor_wheel(src, dest_dir, {TORCH_OP: drop_dense_flag})


def plant_cli(plant: Callable[[Path, Path], Path], doc: str, argv: list[str] | None) -> int:
    """``--version``/``--wheel`` in, ``--out`` the folder: the planted wheel's path printed."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--version", default="1.32.0", help="the registry release to plant into")
    p.add_argument("--wheel", type=Path, help="plant into this wheel instead (no download)")
    p.add_argument("--out", type=Path, required=True, help="the folder the planted wheel goes to")
    args = p.parse_args(argv)
    source = args.wheel if args.wheel is not None else registry_wheel(args.version)
    print(plant(source, args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--provider" in args:
        args.remove("--provider")
        return plant_cli(plant_dropped_provider_flag, __doc__ or "", args)
    return plant_cli(plant_dropped_flag, __doc__ or "", args)


if __name__ == "__main__":
    raise SystemExit(main())
