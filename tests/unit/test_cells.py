"""The matrix's cells and the label match (core/cells.py)."""

from __future__ import annotations

import pytest

from core import cells
from core.cells import Cell


def test_the_host_backend_keeps_the_familys_name() -> None:
    assert [c.name for c in cells.expand(["sm_90", "sm_100"], {"cudnn": ("host",)})] == [
        "sm_90",
        "sm_100",
    ]


def test_a_backend_cell_is_named_for_contexts_gates_and_urls() -> None:
    got = cells.expand(["sm_90", "sm_100"], cells.parse_matrix("cudnn=host,9.28.1"))
    names = [c.name for c in got]
    assert names == ["sm_90", "sm_90-cudnn9.28.1", "sm_100", "sm_100-cudnn9.28.1"]
    for name in names:
        assert Cell.parse(name).name == name
        assert all(ch.isalnum() or ch in "_-." for ch in name)  # a context, a path, a list item
        assert "," not in name and len(name) <= 48
    assert Cell.parse("sm_90-cudnn9.28.1") == Cell("sm_90", "9.28.1")
    with pytest.raises(ValueError):
        Cell.parse("sm_90+9.28.1")


def test_requirements_are_one_canonical_text() -> None:
    cell = Cell("sm_90", "9.28.1")
    assert cells.requires_text(cell.requirements) == "arch=sm_90,cudnn=9.28.1"
    assert cells.requires_text(Cell("sm_90").requirements) == "arch=sm_90"
    assert cells.requires_text({"builder": ""}) == "builder"
    assert cells.parse_requires("arch=sm_90,cudnn=9.28.1") == cell.requirements


@pytest.mark.parametrize(
    ("requires", "labels", "ok"),
    [
        ("", {}, True),  # a CPU job: any runner
        ("arch=sm_90", {"arch": "sm_90"}, True),  # a runner of the previous protocol
        ("arch=sm_90,cudnn=9.28.1", {"arch": "sm_90"}, False),  # ... never a backend's job
        ("arch=sm_90,cudnn=9.28.1", {"arch": "sm_90", "cudnn": "*"}, True),
        ("arch=sm_90,cudnn=9.28.1", {"arch": "sm_90", "cudnn": "9.26.0|9.28.1"}, True),
        ("arch=sm_90,cudnn=9.28.1", {"arch": "sm_90", "cudnn": "9.28"}, False),
        ("arch=sm_90,cudnn=9.28.1", {"arch": "sm_100", "cudnn": "*"}, False),
        ("builder", {"builder": "1"}, True),
        ("builder", {"builder": "0"}, False),
        ("builder", {"arch": "sm_90"}, False),
    ],
)
def test_a_runner_takes_a_job_whose_requirements_its_labels_satisfy(
    requires: str, labels: dict[str, str], ok: bool
) -> None:
    assert cells.satisfied(cells.parse_requires(requires), labels) is ok


def test_an_unknown_backend_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError) as caught:
        cells.parse_matrix("cudnn=host,9.99.1")
    said = str(caught.value)
    assert "unknown cuDNN backend(s) 9.99.1" in said
    assert "known: host, 9.12.0" in said and "9.28.1" in said
    with pytest.raises(ValueError, match="unknown matrix axis 'cuda'"):
        cells.parse_matrix("cuda=13")
    with pytest.raises(ValueError, match="no values"):
        cells.parse_matrix("cudnn=")


def test_the_known_backends_are_the_registrys_releases() -> None:
    names = cells.known_names()
    assert names[0] == "9.12.0" and names[-1] == "9.28.1"
    assert cells.is_known("9.28.1") and cells.is_known("9.28.1.4") and cells.is_known("9.19.0")
    assert not cells.is_known("9.28") and not cells.is_known("8.9.7")
    assert cells.parse_matrix("") == {"cudnn": ("host",)}  # the default
    assert cells.backend_requirement("9.28.1", 12) == "nvidia-cudnn-cu12==9.28.1.*"
