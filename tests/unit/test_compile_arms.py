"""How ``base.compile_only`` compares the two arms of a compile-only subject.

The CuTe DSL is replaced by kernel objects with set names and PTX (``compile_for_sm100`` is
patched): what is under test is the comparison and the arms' isolation, not a compile, which
``tests/functional/test_subjects.py`` and the subjects' own tests do from the real 1.32.0 wheel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.inside.subjects import base, dsa_indexer_bwd

SUBJECT = {"subject": "dsa_indexer_bwd"}


class Kernel:
    """What the DSL's compiled function gives ``compile_only``: its callable's name (with the
    argument signature appended), its PTX and its cubin."""

    def __init__(self, callable_name: str, ptx: str) -> None:
        self.function_name = f"cutlass___call___{callable_name}_object_at__Tensorgmem_i64"
        self.__ptx__ = f".target sm_100a\n{ptx}"
        self.__cubin__ = b"\0" * 16
        Path(f"{callable_name}.sm_100a.ptx").write_text(self.__ptx__)  # as CUTE_DSL_KEEP does


def _compiles(monkeypatch: pytest.MonkeyPatch, made: dict[bool, list[tuple[str, str]]]) -> None:
    cache: set[str] = set()  # the frontend's in-process kernel cache

    def compile_for_sm100(knob: bool, _api: Any, _modules: Any) -> list[Kernel]:
        kernels = [Kernel(c, ptx) for c, ptx in made[knob] if (c, ptx) not in cache]
        cache.update(made[knob])
        return kernels

    monkeypatch.setattr(dsa_indexer_bwd, "compile_target", lambda _c, knob: (knob, None, []))
    monkeypatch.setattr(base, "compile_for_sm100", compile_for_sm100)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUTE_DSL_DUMP_DIR", raising=False)


def test_a_kernel_only_the_deterministic_arm_has_is_no_change_of_the_kernels_both_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = {True: [("gemm", "planes off"), ("fold", "fold")], False: [("gemm", "planes off")]}
    _compiles(monkeypatch, made)
    result = base.compile_only(SUBJECT)
    assert result["status"] == "pass" and result["knob_changes_kernel"] is False
    made[True][0] = ("gemm", "into the planes")
    assert base.compile_only(SUBJECT)["knob_changes_kernel"] is True


def test_arms_with_no_kernel_in_common_compare_as_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """DSA's deterministic backward is another class than its default one."""
    made = {True: [("bwd_deterministic", "a")], False: [("bwd", "a")]}
    _compiles(monkeypatch, made)
    assert base.compile_only(SUBJECT)["knob_changes_kernel"] is True


def test_each_arm_compiles_in_a_process_and_a_folder_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A kernel the first arm compiled is not in the second arm's in-process cache (flex
    attention's plan and backward keep one), so neither arm reads as having compiled nothing;
    and each arm's kept PTX goes to its own folder (the DSL names the file by callable and
    signature, the same in both arms)."""
    shared = [("plan", "p"), ("preprocess", "q")]
    made = {True: [*shared, ("bwd", "ordered")], False: [*shared, ("bwd", "atomics")]}
    _compiles(monkeypatch, made)
    result = base.compile_only(SUBJECT)
    assert result["status"] == "pass", result
    assert result["deterministic"]["kernels"] == result["default"]["kernels"] == 3
    assert result["knob_changes_kernel"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default", "deterministic"]
    kept = (
        tmp_path / "default" / "bwd.sm_100a.ptx",
        tmp_path / "deterministic" / "bwd.sm_100a.ptx",
    )
    assert [p.read_text().split()[-1] for p in kept] == ["atomics", "ordered"]
    assert Path.cwd() == tmp_path  # the parent stays where it was


def test_an_arm_that_raises_is_the_harness_not_fitting_and_a_compile_error_a_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(knob: bool, _api: Any, _modules: Any) -> list[Kernel]:
        if knob:
            raise base.KernelCompileError("DSLUserCodeError: planes do not fit")
        raise AttributeError("IndexerBackward has no _compiled_kernel")

    monkeypatch.setattr(dsa_indexer_bwd, "compile_target", lambda _c, knob: (knob, None, []))
    monkeypatch.setattr(base, "compile_for_sm100", broken)
    with pytest.raises(RuntimeError, match="AttributeError: IndexerBackward has no"):
        base.compile_only(SUBJECT)  # run_stage makes this the result's error
    monkeypatch.setattr(base, "compile_for_sm100", lambda knob, *_: broken(True, None, None))
    failed = base.compile_only(SUBJECT)
    assert failed["status"] == "fail" and "planes do not fit" in failed["reason"]
