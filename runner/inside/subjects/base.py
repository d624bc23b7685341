"""What the determinism harness needs from a subject, and helpers the subjects share.

A subject module declares the subject once, ``DECLARATION = core.subjects.Subject(...)`` in plain
values (the registry reads it from the source: ``docs/adding-a-subject.md``), and takes its configs
and tolerances from it (``configs_of``, ``tolerances_of``). It exposes ``SUBJECT``, an object with
``name``, ``configs`` (ordered small to large) and ``prepare(config, device)``, which builds
identical inputs once and returns a ``Workload``. ``Workload.run(knob)`` runs the backward once,
from cleared gradients, with the knob on or off, and returns the outputs to compare by their
lower-case names; ``reference()`` gives a float32 reference of the same outputs. Standard library
and torch only: the candidate is imported inside ``prepare``, never at module import, so a
CPU-only host can load every subject.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from core.subjects import Subject as Declaration


@dataclass(frozen=True)
class Config:
    """One input size of a subject. ``name`` is what the runner remembers between builds."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.params}


@dataclass(frozen=True)
class Tolerance:
    """Numerics bound, elementwise: ``|x - ref| <= atol + rtol * |ref|``."""

    atol: float
    rtol: float


def configs_of(subject: str | Declaration) -> tuple[Config, ...]:
    """The subject's configs, small to large, as its declaration (or its name's) says them."""
    from core.subjects import SUBJECTS

    entry = SUBJECTS[subject] if isinstance(subject, str) else subject
    return tuple(Config(n, dict(params)) for n, params in entry.configs)


def tolerances_of(subject: Declaration) -> dict[str, Tolerance]:
    """The numerics bound of each output the declaration compares."""
    return {name: Tolerance(**bound) for name, bound in subject.outputs.items()}


@dataclass
class Prepared:
    """What a subject's workload holds besides its inputs: its config, its device, and the
    numerics bound of each output (``Harness.prepare`` gives it the declaration's)."""

    config: Config
    device: torch.device
    tolerances: dict[str, Tolerance] = field(default_factory=dict)


class Harness:
    """A subject's harness from its declaration and its workload class: ``name`` and ``configs``
    are the declaration's, ``prepare(config, device)`` builds ``workload(config, device)`` with
    the declaration's tolerances; ``extra`` sets attributes the stage reads where present
    (``kernel_cache``)."""

    def __init__(self, declaration: Declaration, workload: Any, **extra: Any) -> None:
        self.name = declaration.name
        self.configs = configs_of(declaration)
        self.tolerances = tolerances_of(declaration)
        self.workload = workload
        for attr, value in extra.items():
            setattr(self, attr, value)

    def prepare(self, config: Config, device: torch.device) -> Any:
        work = self.workload(config, device)
        work.tolerances = dict(self.tolerances)
        return work


class Workload(Protocol):
    tolerances: Mapping[str, Tolerance]

    def run(self, knob: bool) -> dict[str, torch.Tensor]: ...

    def reference(self) -> dict[str, torch.Tensor]: ...


class Subject(Protocol):
    name: str
    configs: tuple[Config, ...]

    def prepare(self, config: Config, device: torch.device) -> Workload: ...


def knob_present(entry_point: str, knob: str, method: str) -> tuple[bool, str]:
    """Whether the entry point takes the knob, read as the probe reads it: (present, why)."""
    from runner.inside import introspect

    try:
        fn = introspect.resolve(entry_point)
    except (introspect.Absent, introspect.ImportFailed) as exc:  # the subject is not there
        return False, f"{entry_point} not importable: {introspect.describe(exc.cause)}"
    params, _ = introspect.read_parameters(fn, method)
    found = params is not None and knob in params
    if found:
        return True, ""
    if method == "torch_flag":
        return False, f"{entry_point} does not read torch.are_deterministic_algorithms_enabled()"
    return False, f"{entry_point} has no '{knob}'"


def seeded(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def configure_compile_cache(where: str | None, key: str | None = None) -> dict[str, Any]:
    """Point the CuTe DSL's persistent caches at ``where``, before the frontend is imported.

    The runner chose the directory and its key outside the sandbox
    (``runner/cache/compile_cache.py``): it holds read-only links to the entries published under
    that key and takes new ones.
    """
    if not where:
        return {"dir": None, "key": None, "warm": False}
    root = Path(where)
    try:  # an unreadable directory reads as cold, never as a failed stage
        warm = root.is_dir() and any(p.is_file() for p in root.rglob("*"))
        for sub in ("cute", "flex"):
            (root / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # an unwritable cache costs compile time, never the stage
        return {"dir": None, "key": key, "warm": False, "error": f"{type(exc).__name__}: {exc}"}
    os.environ["CUTE_DSL_CACHE_DIR"] = str(root / "cute")
    os.environ["FLEX_ATTENTION_CUTE_DSL_CACHE_DIR"] = str(root / "flex")
    os.environ["FLEX_ATTENTION_CUTE_DSL_CACHE_ENABLED"] = "1"
    return {"dir": str(root), "key": key, "warm": warm}


# ---------------------------------------------------------------- compile-only, without Blackwell

COMPILE_ARCH = "sm_100a"
B200_SMS = 148


class _Sm100Info:
    """Stands in for ``cutlass.utils.HardwareInfo``: a B200's multiprocessor count."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_max_active_clusters(self, cluster_size: int) -> int:
        return B200_SMS // max(cluster_size, 1)

    def get_device_multiprocessor_count(self) -> int:
        return B200_SMS


class _Compiled(Exception):
    """Raised right after the wrapper's kernel object compiled, so nothing can launch."""


class KernelCompileError(Exception):
    """The CuTe DSL itself failed to compile the kernel: a defect of the build."""


def _aligned_workspace(_framework: Any, nbytes: int, device: Any) -> torch.Tensor:
    raw = torch.empty(nbytes + 256, dtype=torch.uint8, device=device)
    start = (-raw.data_ptr()) % 256
    return raw[start : start + nbytes]


def compile_for_sm100(call: Any, api_class: Any, modules: list[Any]) -> list[Any]:
    """Drive a wrapper until its kernel compiles for sm_100a, as if on such a GPU; no launch.

    The wrapper's own code (or a kernel class's, given ``fake_cuda`` sample tensors) builds the
    kernel object, checks support and compiles through the CuTe DSL (``CUTE_DSL_ARCH`` must name
    the target before the DSL is imported); only the device queries are answered as an sm_100 GPU
    would answer them (and ``torch.cuda.device`` is a no-op, a stream the frontend resolves is the
    default one), and the kernel object's ``compile`` stops the call before anything could run.

    A kernel the frontend compiles lazily, at its first launch, has no ``compile`` to stop at:
    with ``api_class=None``, ``call`` is a sequence of steps, each driven up to the kernel its
    launch would compile and stopped right after that compile (the kernels of one arm in order).
    """
    from contextlib import ExitStack, nullcontext
    from types import SimpleNamespace
    from unittest import mock

    import cutlass.cute
    import cutlass.utils
    from cuda.bindings.driver import CUstream

    kernels: list[Any] = []
    real_compile = cutlass.cute.compile
    lazy = api_class is None
    steps = list(call) if lazy else [call]

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            kernel = real_compile(*args, **kwargs)
        except Exception as exc:
            raise KernelCompileError(f"{type(exc).__name__}: {exc}") from exc
        kernels.append(kernel)
        if lazy:  # its launch comes next
            raise _Compiled
        return kernel

    answers = {
        "cuda_is_available": lambda: True,
        "get_compute_capability": lambda *_a: (10, 0),
        "device_capability": lambda *_a: (10, 0),
        "allocate_byte_workspace": _aligned_workspace,
        "resolve_stream": lambda *_a: CUstream(0),
        "_resolve_stream": lambda *_a: CUstream(0),
    }
    with ExitStack() as stack:
        patch = stack.enter_context
        patch(mock.patch.object(cutlass.cute, "compile", spy))
        patch(mock.patch.object(cutlass.utils, "HardwareInfo", _Sm100Info))
        if not lazy:
            real_api_compile = api_class.compile

            def compile_then_stop(self: Any) -> None:
                real_api_compile(self)
                raise _Compiled

            patch(mock.patch.object(api_class, "compile", compile_then_stop))
        patch(mock.patch.object(torch.cuda, "is_available", lambda: True))
        patch(mock.patch.object(torch.cuda, "current_device", lambda: 0))
        patch(mock.patch.object(torch.cuda, "get_device_capability", lambda *_a: (10, 0)))
        patch(mock.patch.object(torch.cuda, "device", lambda *_a, **_k: nullcontext()))
        props = SimpleNamespace(major=10, minor=0, multi_processor_count=B200_SMS, name="sm_100")
        patch(mock.patch.object(torch.cuda, "get_device_properties", lambda *_a: props))
        for module in modules:
            for name, value in answers.items():
                if hasattr(module, name):
                    patch(mock.patch.object(module, name, value))
        for step in steps:
            try:
                step()
            except _Compiled:
                continue
            raise RuntimeError("the wrapper returned without compiling a kernel")
    return kernels


def fake_cuda(*specs: tuple[tuple[int, ...], torch.dtype]) -> list[torch.Tensor]:
    """Tensors that say they live on a CUDA device, without one (torch's fake tensors: shape,
    strides, dtype and device, no data): a kernel class's sample tensors for a compile."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        return [torch.empty(shape, dtype=dtype, device="cuda") for shape, dtype in specs]


def _artifact(kernel: Any, name: str) -> bytes:
    data = getattr(kernel, name, None) or b""
    return data.encode() if isinstance(data, str) else bytes(data)


def kernel_callable(kernel: Any) -> str:
    """What a compiled kernel was compiled from (``cutlass___call___<module><class>``), without
    the argument signature the DSL appends: the same callable in both arms is the same kernel."""
    name = str(getattr(kernel, "function_name", "") or "")
    return name.split("_object_at_")[0] or name


def _compile_arm(module: Any, config: Config, knob: bool) -> dict[str, Any]:
    """One arm's kernels compiled: its figures, and each callable's PTX digests."""
    import re
    import time

    arm = "deterministic" if knob else "default"
    # the DSL keeps each kernel's PTX and cubin in a file named by its callable and signature,
    # the same in both arms (the knob is the kernel object's): each arm writes its own folder
    folder = Path(os.environ.get("CUTE_DSL_DUMP_DIR") or Path.cwd()) / arm
    folder.mkdir(exist_ok=True)
    os.chdir(folder)
    os.environ["CUTE_DSL_DUMP_DIR"] = str(folder)
    start = time.perf_counter()
    try:
        kernels = compile_for_sm100(*module.compile_target(config, knob))
    except KernelCompileError as exc:
        return {"fail": f"{arm} kernel: {exc}"[:2000]}
    ptx = b"".join(_artifact(k, "__ptx__") for k in kernels)
    by_callable: dict[str, list[str]] = {}
    for k in kernels:
        digest = hashlib.sha256(_artifact(k, "__ptx__")).hexdigest()
        by_callable.setdefault(kernel_callable(k), []).append(digest)
    return {
        "kernels": len(kernels),
        "compile_s": round(time.perf_counter() - start, 3),
        "targets": sorted({t.decode() for t in re.findall(rb"\.target\s+(\S+)", ptx)}),
        "ptx_sha256": hashlib.sha256(ptx).hexdigest()[:16],
        "cubin_bytes": sum(len(_artifact(k, "__cubin__")) for k in kernels),
        "by_callable": {name: sorted(d) for name, d in by_callable.items()},
    }


def compile_only(params: dict[str, Any]) -> dict[str, Any]:
    """Compile a subject's sm_100a kernels with the knob on and off; run nothing.

    ``python -m runner.inside.subjects.base --in P --out R`` in a fresh process with
    ``CUTE_DSL_ARCH=sm_100a`` and ``CUTE_DSL_KEEP=ptx,cubin``: no GPU is needed. Each arm compiles
    in a process of its own, forked from this one, the two at once: neither finds a kernel the
    other compiled in the frontend's in-process caches (flex attention's plan and backward keep
    theirs), so each arm's kernels are all compiled, and the arms are compared callable by
    callable (a kernel only the deterministic arm has, such as the indexer's dK fold, is no
    change of one both have). ``status`` is ``pass`` when both arms compiled to sm_100a machine
    code, ``fail`` when the DSL could not compile one (a defect of the build), ``error`` when this
    harness does not fit the build.
    """
    import importlib

    from core.subjects import SUBJECTS
    from runner.inside import forked

    module = importlib.import_module(SUBJECTS[params["subject"]].module_name)
    configs = {c.name: c for c in module.SUBJECT.configs}
    # the module's COMPILE_CONFIG where it names one, else the second config
    config = configs[
        params.get("config") or getattr(module, "COMPILE_CONFIG", module.SUBJECT.configs[1].name)
    ]
    out: dict[str, Any] = {"config": config.describe(), "arch": COMPILE_ARCH}
    children = {knob: forked.start(_compile_arm, module, config, knob) for knob in (True, False)}
    arms = {knob: forked.result(child) for knob, child in children.items()}
    for knob in (True, False):
        if "fail" in arms[knob]:
            return {**out, "status": "fail", "reason": arms[knob]["fail"]}
    each = {knob: arms[knob].pop("by_callable") for knob in arms}
    det, default = out["deterministic"], out["default"] = arms[True], arms[False]
    ok = all(
        a["kernels"] and a["cubin_bytes"] and COMPILE_ARCH in a["targets"] for a in (det, default)
    )
    common = each[True].keys() & each[False].keys()
    out["knob_changes_kernel"] = (
        any(each[True][c] != each[False][c] for c in common)
        if common
        else each[True] != each[False]  # no callable in common: the knob picks other kernels
    )
    out["status"] = "pass" if ok else "fail"
    if not ok:
        out["reason"] = "no sm_100a machine code came out of the compile"
    return out


if __name__ == "__main__":
    from runner.inside._io import main

    main(compile_only)
