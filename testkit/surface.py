"""The determinism surface of a wheel, discovered the probe's way over the wheel's own files.

``discover_wheel`` extracts the wheel into a temporary folder and runs
``runner.inside.discovery`` in a fresh interpreter with that folder first on ``sys.path``: the
source is read with ``ast``, and ``cudnn`` is imported only for its compiled graph class's
signature lines (no GPU needed). Installing is not needed: the probe reads the same files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_SCRIPT = """
import json, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from runner.inside import discovery
try:
    import cudnn
    compiled = discovery.compiled_graph(cudnn)
except Exception as exc:
    print(f"cudnn did not import: {exc}", file=sys.stderr)
    compiled = None
doc = discovery.discover(Path(sys.argv[1]) / "cudnn", compiled, seconds=float(sys.argv[3]))
sys.stdout.write(json.dumps(doc))
"""


def discover_wheel(
    wheel: Path, *, seconds: float = 120.0, timeout: float = 300.0
) -> dict[str, Any]:
    """The surface document of ``wheel`` (``discovery.discover``'s shape)."""
    with tempfile.TemporaryDirectory(prefix="fe-ci-surface-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, tmp, str(ROOT), str(seconds)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"discovery over {wheel.name} failed: {done.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def knob_set(doc: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    """{(entry point, knob): default} of a surface document or a ledger entry."""
    return {(k["entry_point"], k["knob"]): k["default"] for k in doc["knobs"]}
