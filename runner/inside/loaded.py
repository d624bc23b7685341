"""Which libcudnn a stage process has loaded, read from ``/proc/self/maps`` (standard library only).

A job on a cuDNN backend of the matrix starts its stages with the backend layer's
``nvidia/cudnn/lib`` first on ``LD_LIBRARY_PATH`` (``runner/envs/backend.py``); torch may still
have loaded a libcudnn of its own (an RPATH wins over ``LD_LIBRARY_PATH``). The stage reports
what was mapped after torch loaded (``torch``) and what the frontend's first backend call added
(``frontend``; where it added nothing, it took the library already loaded, since a second
``dlopen`` of a loaded soname returns it), so the report proves which library each one used. A
CPU-only torch loads none: the lists are empty.
"""

from __future__ import annotations

import re

MAPS = "/proc/self/maps"
_LIBCUDNN = re.compile(r"/libcudnn[^/]*\.so(?:\.[0-9.]*)?$")
MAX_PATHS = 8


def libcudnn_paths(maps: str) -> list[str]:
    """The distinct libcudnn*.so* files mapped, in the order first mapped, from the text of a
    ``/proc/<pid>/maps`` (the path is the sixth field and may hold spaces)."""
    seen: dict[str, None] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue
        path = fields[5].strip()
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        if path.startswith("/") and _LIBCUDNN.search(path):
            seen.setdefault(path, None)
    return list(seen)[:MAX_PATHS]


def loaded_libcudnn() -> list[str]:
    """The libcudnn files this process has mapped now ([] where ``/proc`` cannot be read)."""
    try:
        with open(MAPS, encoding="utf-8", errors="replace") as fh:
            return libcudnn_paths(fh.read())
    except OSError:
        return []


def by_loader(before: list[str], after: list[str]) -> dict[str, list[str]]:
    """``{"torch": ..., "frontend": ...}`` from the libraries mapped before and after the
    frontend's first backend call."""
    added = [p for p in after if p not in before]
    return {"torch": before, "frontend": added or [p for p in after if p in before]}
