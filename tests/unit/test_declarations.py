"""The registry reads each subject's declaration from its module's source, never running it.

Real files in a temporary folder, read as ``core/subjects.py`` reads ``runner/inside/subjects/``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core import subjects
from core.declarations import SUBJECTS_DIR, DeclarationError
from core.subjects import SUBJECTS, declared, families_of, release_history

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
import torch  # the harness's; the registry never imports it

from core.subjects import Subject

DECLARATION = Subject(
    name="{name}",
    entry_point="cudnn.{name}",
    knob="deterministic",
    families={families!r},
    outputs={{"dx": {{"atol": 1e-2, "rtol": 1e-4}}}},
    configs=(("small", {{"n": 1}}), ("large", {{"n": 2}})),
    history={{"since": "1.30.0", "missing_in": ["1.31.0"], "source": "s", "evidence": "e"}},
)

open({marker!r}, "w").write("ran")  # would show that the module was run
"""


def write(folder: Path, name: str, families: tuple[str, ...] = ("sm_90",)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    marker = str(folder / f"{name}.ran")
    path.write_text(GOOD.format(name=name, families=families, marker=marker))
    return path


def test_a_declaration_is_read_without_running_its_module(tmp_path: Path) -> None:
    write(tmp_path, "toy_a")
    (tmp_path / "helpers.py").write_text("import torch\nraise SystemExit('never run')\n")
    found = declared(tmp_path)
    assert list(found) == ["toy_a"]
    toy = found["toy_a"]
    assert (toy.entry_point, toy.families, dict(toy.outputs)) == (
        "cudnn.toy_a",
        ("sm_90",),
        {"dx": {"atol": 1e-2, "rtol": 1e-4}},
    )
    assert toy.config_names == ("small", "large")
    assert toy.history["since"] == "1.30.0"
    assert not list(tmp_path.glob("*.ran"))


def test_an_extra_folder_adds_its_subjects_after_the_builtins(tmp_path: Path) -> None:
    write(tmp_path / "extra", "toy_b", families=("sm_90", "sm_120"))
    found = declared(extra=str(tmp_path / "extra"))
    assert list(found)[: len(SUBJECTS)] == list(SUBJECTS)
    assert found["toy_b"].module_name == "toy_b"  # imported by the file's name
    assert str(tmp_path / "extra") in sys.path
    sys.path.remove(str(tmp_path / "extra"))
    assert families_of(found) == ("sm_80", "sm_90", "sm_100", "sm_120")


def test_the_families_are_those_the_declarations_name() -> None:
    assert subjects.FAMILIES == families_of(SUBJECTS) == ("sm_80", "sm_90", "sm_100")
    only_hopper = {n: s for n, s in SUBJECTS.items() if s.families == ("sm_90", "sm_100")}
    assert families_of(only_hopper) == ("sm_90", "sm_100")


def test_a_subjects_release_history_comes_from_its_declaration() -> None:
    history = release_history()
    assert history["grouped_gemm_dglu.deterministic"]["missing_in"] == ["1.30.0"]
    assert history["flex_attention_bwd.deterministic"]["since"] == "1.29.0"
    ledger = json.loads(subjects.LEDGER_PATH.read_text())["features"]
    assert [e["id"] for e in ledger] == ["grouped_gemm_quant.optional_prob_tensor"]


BAD = {
    "not_literal": ('families=tuple(["sm_90"]),', "families= is not a literal"),
    "positional": ('"x",', "keyword arguments only"),
    "unknown_field": ('colour="red",', "unexpected keyword argument 'colour'"),
    "no_bound": ('outputs={"dx": {"atol": 1}},', "output 'dx' needs"),
    "splat": ("**FIELDS,", "name each field"),
    "unknown_method": ('probe_method="guess",', "probe_method 'guess' is not one of"),
    "flag_method_other_knob": ('probe_method="torch_flag",', "goes with probe_method"),
    "bad_backend": ('min_backend="9.2o",', "min_backend '9.2o' is not a cuDNN version"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_declaration_that_is_not_plain_values_is_refused_naming_its_file(
    tmp_path: Path, case: str
) -> None:
    extra, said = BAD[case]
    outputs = "" if "outputs=" in extra else 'outputs={"dx": {"atol": 1, "rtol": 1}},'
    text = (
        f"DECLARATION = Subject({extra} name={case!r}, entry_point='e', knob='k', "
        f"families=('sm_90',), {outputs})\n"
    )
    (tmp_path / f"{case}.py").write_text(text)
    with pytest.raises(DeclarationError) as err:
        declared(tmp_path)
    assert f"{case}.py" in str(err.value) and said in str(err.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("DECLARATION = Subject(name='other', entry_point='e', knob='k', families=('sm_90',), "
         "outputs={'dx': {'atol': 1, 'rtol': 1}})\n", "a subject's file is its name"),
        ("DECLARATION = (\n", "does not parse"),
        ("DECLARATION = dict(name='x')\n", "must be Subject(...)"),
        ("DECLARATION = 1\nDECLARATION = 2\n", "assigned 2 times"),
    ],
)  # fmt: skip
def test_a_broken_subject_module_is_a_clear_error(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "named.py").write_text(text)
    with pytest.raises(DeclarationError, match=said):
        declared(tmp_path)


def test_the_same_subject_twice_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "sdpa_bwd", families=("sm_90",))
    with pytest.raises(DeclarationError, match="'sdpa_bwd' is declared twice"):
        declared(extra=str(tmp_path))


def test_a_missing_extra_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError, match="no such file or folder"):
        declared(extra=str(tmp_path / "nowhere"))


def test_the_service_side_reads_every_subject_without_torch() -> None:
    """The registry, the service's app and ``fe-ci configs`` with torch made unimportable."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from core.subjects import SUBJECTS\n"
        "import service.app, cli.configs\n"
        "print(sorted(SUBJECTS), [len(s.configs) for s in SUBJECTS.values()])\n"
        "print(sorted(m for m in sys.modules if m.startswith('runner.inside')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-P", "-c", code],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0] == f"{sorted(SUBJECTS)} {[len(s.configs) for s in SUBJECTS.values()]}"
    assert out[1] == "[]"  # no subject module was imported
    declaring = [p.stem for p in SUBJECTS_DIR.glob("*.py") if "\nDECLARATION = " in p.read_text()]
    assert sorted(declaring) == sorted(SUBJECTS)


def test_the_torch_flag_subjects_are_declared_in_their_own_modules() -> None:
    """Their knob, probe method, backend floor and history come from their files' declarations,
    read by ast, and from nowhere else."""
    found = declared()
    for name in ("sdpa_torch_bwd", "causal_conv1d_bwd"):
        s = found[name]
        assert (s.knob, s.probe_method, s.module_name) == (
            "torch_flag",
            "torch_flag",
            f"runner.inside.subjects.{name}",
        )
        assert release_history()[s.feature]["since"] == s.history["since"] == "1.29.0"
        assert "DECLARATION = Subject(" in (SUBJECTS_DIR / f"{name}.py").read_text()
    assert found["causal_conv1d_bwd"].min_backend == "9.20.0"
    assert found["sdpa_torch_bwd"].min_backend == ""
    for elsewhere in (ROOT / "core" / "subjects.py", subjects.LEDGER_PATH):
        text = elsewhere.read_text()
        assert "sdpa_torch_bwd" not in text and "causal_conv1d_bwd" not in text


def test_lists_in_a_declaration_read_as_tuples(tmp_path: Path) -> None:
    (tmp_path / "listed.py").write_text(
        "DECLARATION = Subject(name='listed', entry_point='e', knob='k', families=['sm_90'], "
        "outputs={'dx': {'atol': 1, 'rtol': 1}}, configs=[['small', {'n': 1}]])\n"
    )
    listed = declared(tmp_path)["listed"]
    assert (listed.families, listed.configs) == (("sm_90",), (("small", {"n": 1}),))


def test_a_subject_may_walk_another_subjects_configs_and_only_one_set() -> None:
    """``configs_from`` reads the other subject's configs from its module's source (dGLU walks
    dSReLU's shapes); declaring both, or naming a subject without configs, is refused."""
    dglu, dsrelu = SUBJECTS["grouped_gemm_dglu"], SUBJECTS["grouped_gemm_dsrelu"]
    assert dglu.configs_from == "grouped_gemm_dsrelu" and dglu.configs == dsrelu.configs
    base = {"name": "x", "entry_point": "cudnn.x", "knob": "deterministic",
            "families": ("sm_90",), "outputs": {"dx": {"atol": 1.0, "rtol": 0.0}}}  # fmt: skip
    with pytest.raises(ValueError, match="one of them"):
        subjects.Subject(**base, configs=(("a", {}),), configs_from="grouped_gemm_dsrelu")
    for other in ("no_such_subject", "../core/subjects", "grouped_gemm_dglu"):  # dglu has none
        with pytest.raises(ValueError, match="names no subject declaring configs"):
            subjects.Subject(**base, configs_from=other)


def test_a_torch_flag_declaration_needs_no_probe_method_and_says_whose_backward() -> None:
    conv = SUBJECTS["causal_conv1d_bwd"]
    assert (
        conv.probe_method == subjects.TORCH_FLAG and conv.backward_of == "cudnn.ops.causal_conv1d"
    )
    feature = subjects.knob_feature(conv)
    assert feature.has == (
        "cudnn.ops.causal_conv1d's backward already follows torch.use_deterministic_algorithms"
    )
    assert "does not read torch.are_deterministic_algorithms_enabled()" in feature.lacks
    assert SUBJECTS["sdpa_bwd"].probe_method == "docstring"  # declared, kept
    assert SUBJECTS["flex_attention_bwd"].probe_method == "signature"  # the default
