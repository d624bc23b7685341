"""What a runner offers: the GPU it detects, and ``arch=none`` for a CPU runner on a GPU host.

The GPU is an ``nvidia-smi`` on ``PATH`` that prints what an H200's prints: a fake, because no
GPU exists on this host; the detection reads nothing else.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from core import cells
from core.cells import Cell
from runner.agent import labels

H200 = "NVIDIA H200, 9.0, 580.95.05"


@pytest.fixture
def an_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{H200}'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


@pytest.mark.usefixtures("an_h200")
def test_the_gpu_is_detected_and_takes_its_familys_jobs() -> None:
    offered = labels.host_labels(None)
    assert offered["arch"] == "sm_90" and offered["gpu"] == "NVIDIA H200"
    assert cells.satisfied(Cell("sm_90").requirements, offered)
    assert cells.satisfied(Cell("sm_90", "9.28.1").requirements, offered)


@pytest.mark.usefixtures("an_h200")
def test_arch_none_offers_no_gpu_on_a_gpu_host() -> None:
    """A CPU runner beside the GPU runner: it takes the CPU job (no requirements) while the
    GPU runner runs the GPU job, and never a GPU job itself."""
    offered = labels.host_labels({"arch": "None", "name": "side"})
    assert not set(offered) & set(labels.GPU_LABELS)
    assert offered["name"] == "side" and offered[cells.CUDNN] == cells.ANY_VALUE
    assert cells.satisfied({}, offered)
    assert not cells.satisfied(Cell("sm_90").requirements, offered)
    assert not cells.satisfied(Cell("sm_100", "9.28.1").requirements, offered)


@pytest.mark.usefixtures("an_h200")
def test_a_label_overrides_detection_key_by_key() -> None:
    offered = labels.host_labels({"arch": "sm_100", "cudnn": "host"})
    assert offered["arch"] == "sm_100" and offered["gpu"] == "NVIDIA H200"
    assert not cells.satisfied(Cell("sm_100", "9.28.1").requirements, offered)
