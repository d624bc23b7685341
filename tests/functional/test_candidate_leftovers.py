"""What a candidate leaves where the runner reads never breaks the runner: a folder, a link, a
fifo, a huge file or bytes that are not UTF-8 in place of a stage's document each end that stage
``error`` in the candidate's name, with no host path in the reason, and the next build passes.
Real wheels through the real pipeline, in the host's sandbox."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.pipeline import pipeline, pipeline_options
from testkit.wheels import dist_info, frontend_members, make_wheel, wheel_bytes, wheel_name

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and os.geteuid() != 0,
    reason="needs bubblewrap or root for the candidate's sandbox (CI installs bwrap, runs as root)",
)

# the probe's import plants a folder where the next stage's document goes (found in the field)
PLANT_NEXT = """\
import os, sys
if sys.argv[0].endswith("probe.py"):
    os.makedirs("refusal.result.json/inner", exist_ok=True)
"""

# once the stage has written its document, the candidate swaps it for something else: its import
# wraps os.replace, with which the stage puts its document in place (the process ends right after,
# exit handlers unrun, so the swap rides on the write itself)
SWAP = """\
import os, sys
out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None

def swap():
    os.unlink(out)
    kind = {kind!r}
    if kind == "folder":
        os.mkdir(out)
    elif kind == "link":
        os.symlink("/etc/passwd", out)
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "huge":
        with open(out, "wb") as fh:
            fh.truncate(65 << 20)
    elif kind == "bytes":
        with open(out, "wb") as fh:
            fh.write(b'{{"status": "pass\\xff\\xfe"}}')
    elif kind == "deep":
        with open(out, "w") as fh:
            fh.write("[" * 200000 + "]" * 200000)

_replace = os.replace

def replace(src, dst, *args, **kwargs):
    _replace(src, dst, *args, **kwargs)
    if out is not None and os.path.abspath(dst) == os.path.abspath(out):
        swap()

os.replace = replace
"""


def _run(tmp_path: Path, name: str, init_py: str, version: str, stages: list[Stage]) -> dict:
    wheel = make_wheel(tmp_path / f"{name}-wheel", version, init_py)
    opts = pipeline_options.Options(
        stages=stages, work_dir=tmp_path / name, report_unselected=False
    )
    result = pipeline.Pipeline(opts).run(wheel)
    return {s.name: s for s in result.stages}


def _genuine_build_passes(tmp_path: Path) -> None:
    stages = _run(tmp_path, "genuine", "", "1.32.1", [Stage.install, Stage.probe])
    assert stages[Stage.probe].status == Status.pass_, stages[Stage.probe]


def test_a_folder_planted_at_the_next_stages_document_is_that_stages_error(
    tmp_path: Path,
) -> None:
    stages = _run(
        tmp_path, "hostile", PLANT_NEXT, "1.32.0", [Stage.install, Stage.probe, Stage.refusal]
    )
    assert stages[Stage.probe].status == Status.pass_, stages[Stage.probe]
    refusal = stages[Stage.refusal]  # the runner cleared the folder away: the stage ran
    assert refusal.status not in (Status.error, Status.crashed), refusal
    _genuine_build_passes(tmp_path)


@pytest.mark.parametrize("kind", ["folder", "link", "fifo", "huge", "bytes", "deep"])
def test_a_document_swapped_for_anything_else_is_the_candidates_error(
    tmp_path: Path, kind: str
) -> None:
    stages = _run(
        tmp_path, "hostile", SWAP.format(kind=kind), "1.32.0", [Stage.install, Stage.probe]
    )
    probe = stages[Stage.probe]
    assert probe.status == Status.error, probe
    assert "the probe stage wrote a document the runner does not accept" in probe.reason, probe
    assert str(tmp_path) not in probe.reason
    _genuine_build_passes(tmp_path)


def test_a_pth_file_printing_megabytes_of_bytes_that_are_not_utf8_never_breaks_the_install(
    tmp_path: Path,
) -> None:
    """After installing, the runner asks the environment for its path (``layers.env_paths``);
    a ``.pth`` file of the wheel runs there and answers with what it likes."""
    pth = "import sys; sys.stdout.buffer.write(b'\\xff\\xfe' * (3 << 20)); sys.stdout.flush()\n"
    members = {**frontend_members("1.32.0", ""), "zz_fe_ci_noise.pth": pth.encode()}
    wheel = tmp_path / wheel_name("1.32.0")
    wheel.write_bytes(wheel_bytes(members, record=dist_info("1.32.0")))
    opts = pipeline_options.Options(
        stages=[Stage.install],
        work_dir=tmp_path / "job",
        layers_dir=tmp_path / "layers",
        report_unselected=False,
    )
    result = pipeline.Pipeline(opts).run(wheel)
    install = {s.name: s for s in result.stages}[Stage.install]
    assert install.status == Status.pass_, install
    assert "candidate only" in install.reason  # the warm path, which asks
