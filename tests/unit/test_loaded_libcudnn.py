"""The stage's word on which libcudnn is loaded (runner/inside/loaded.py), read from the real
``/proc/<pid>/maps`` of a process that dlopened a shared library named ``libcudnn.so.9`` (a copy
of the host's zlib: no cuDNN exists on this host)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from runner.inside import loaded
from testkit.backends import HOST_LIB

LOAD_AND_PRINT_MAPS = (
    "import ctypes, sys\n"
    "ctypes.CDLL(sys.argv[1])\n"
    "sys.stdout.write(open('/proc/self/maps').read())\n"
)


def test_the_parser_finds_the_mapped_libcudnn_in_real_maps(tmp_path: Path) -> None:
    lib_dir = tmp_path / "with space" / "nvidia" / "cudnn" / "lib"
    lib_dir.mkdir(parents=True)
    lib = lib_dir / "libcudnn.so.9"
    shutil.copy(HOST_LIB, lib)
    maps = subprocess.run(
        [sys.executable, "-c", LOAD_AND_PRINT_MAPS, str(lib)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert maps.count(str(lib)) >= 2  # mapped in several segments: reported once
    assert loaded.libcudnn_paths(maps) == [str(lib)]


def test_a_process_without_libcudnn_reports_none() -> None:
    maps = Path("/proc/self/maps").read_text()
    assert "libz" in maps or "libc" in maps  # real maps, with shared libraries in them
    assert loaded.libcudnn_paths(maps) == []
    assert loaded.loaded_libcudnn() == []  # this CPU-only torch (if imported) loads none


def test_the_parser_reads_every_libcudnn_file_and_nothing_else() -> None:
    maps = "\n".join(
        [
            "7f00-7f01 r--p 00000000 08:01 1 /opt/a/nvidia/cudnn/lib/libcudnn.so.9",
            "7f01-7f02 r-xp 00001000 08:01 1 /opt/a/nvidia/cudnn/lib/libcudnn.so.9",
            "7f02-7f03 r--p 00000000 08:01 2 /opt/a/lib/libcudnn_graph.so.9.28.1 (deleted)",
            "7f03-7f04 r--p 00000000 08:01 3 /opt/a/lib/libcudnn_notreally.txt",
            "7f04-7f05 rw-p 00000000 00:00 0 [heap]",
            "7f05-7f06 r--p 00000000 08:01 4 /opt/b/libcudnn.so",
            "garbage",
        ]
    )
    assert loaded.libcudnn_paths(maps) == [
        "/opt/a/nvidia/cudnn/lib/libcudnn.so.9",
        "/opt/a/lib/libcudnn_graph.so.9.28.1",
        "/opt/b/libcudnn.so",
    ]
    before = ["/opt/torch/lib/libcudnn.so.9"]
    assert loaded.by_loader(before, [*before, "/layer/libcudnn.so.9"]) == {
        "torch": before,
        "frontend": ["/layer/libcudnn.so.9"],
    }
    assert loaded.by_loader(before, before) == {"torch": before, "frontend": before}
