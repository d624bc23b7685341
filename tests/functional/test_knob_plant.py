"""The dropped indexer knob (``testkit/knob_plant.py``) on the registry's real 1.32.0 wheel, CPU
only: one keyword line of ``IndexerTopK.compile`` gone and RECORD rewritten, the wheel accepted
by the upload door, and the probe seeing the same knob on both builds, so only the determinism
stage on a GPU can catch it (``bench/gpu_stream.py`` plan letter ``K``)."""

from __future__ import annotations

import difflib
import json
import os
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from service.uploads.wheelcheck import check_wheel
from testkit import processes
from testkit.knob_plant import API, KEYWORD, SUBJECT, drop_knob, plant_dropped_knob
from testkit.registry import candidate_env, registry_wheel
from testkit.service import ROOT

pytestmark = pytest.mark.slow  # the registry's 1.32.0 wheel, unpacked and probed twice

_PROBE = f"""
import json
from core.subjects import SUBJECTS
from runner.inside import probe
import cudnn
cap = probe.probe_subject(SUBJECTS[{SUBJECT!r}])["capability"]
print(json.dumps({{"cap": cap, "from": cudnn.__file__}}))
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    original = registry_wheel("1.32.0")
    return {
        "original": original,
        "planted": plant_dropped_knob(original, tmp_path_factory.mktemp("k")),
    }


def test_one_keyword_line_of_the_kernels_compile_goes_and_the_door_accepts_the_wheel(
    wheels: dict[str, Path],
) -> None:
    members = {}
    for label, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as zf:
            members[label] = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
    original, planted = members["original"], members["planted"]
    assert sorted(n for n in original if original[n] != planted.get(n)) == [
        API, "nvidia_cudnn_frontend-1.32.0.dist-info/RECORD"
    ]  # fmt: skip
    before, after = (m[API].decode().splitlines() for m in (original, planted))
    removed = [d[1:].strip() for d in difflib.ndiff(before, after) if d.startswith("- ")]
    assert removed == [KEYWORD] and not [d for d in difflib.ndiff(before, after) if d[:2] == "+ "]
    # the wrapper still takes the knob and keys its cache on it: only the kernel lost it
    assert "    deterministic: bool = False," in after and "        bool(deterministic)," in after
    got = check_wheel(wheels["planted"], wheels["planted"].name, Version("1.32.0"), 1 << 31)
    assert got == ("nvidia-cudnn-frontend", "1.32.0")


def test_the_probe_sees_the_same_knob_on_both_builds(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    seen = {}
    for label, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp_path / label)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / label), str(ROOT)])
        python = candidate_env("1.32.0").python  # the release's environment (its DSL)
        done = processes.run([str(python), "-c", _PROBE], env=env, cwd=tmp_path, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["from"].startswith(str(tmp_path / label)), got  # this build's files
        seen[label] = got["cap"]
    assert seen["original"]["present"] is True and seen["original"] == seen["planted"]


def test_a_release_without_the_line_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no single IndexerTopK\.compile"):
        drop_knob(b"class IndexerTopK:\n    pass\n")
    with pytest.raises(ValueError, match="0 calls of compile_topk_kernel"):
        drop_knob(b"class IndexerTopK:\n    def compile(self):\n        k.compile_topk_kernel()\n")
    with pytest.raises(ValueError, match="0 calls of compile_topk_kernel"):
        plant_dropped_knob(registry_wheel("1.31.0"), tmp_path)  # its kernel had no knob yet
    assert list(tmp_path.iterdir()) == []  # nothing half-written
