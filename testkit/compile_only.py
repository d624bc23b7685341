"""A subject's sm_100a compile-only run in a real release's environment, the way the
determinism stage's worker runs it (``python -m runner.inside.subjects.base``, no GPU visible):
for the subjects' own tests on a host without that GPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def compile_in_release(
    subject: str, folder: Path, release: str = "1.32.0", config: str | None = None
) -> dict[str, Any]:
    """The compile-only result of ``subject`` (at ``config``, else its ``COMPILE_CONFIG``) from
    the registry's ``release``; its kept PTX and cubin land in ``folder``."""
    from testkit.registry import candidate_env

    env = candidate_env(release)
    params = folder / "params.json"
    params.write_text(json.dumps({"subject": subject, **({"config": config} if config else {})}))
    out = folder / "result.json"
    run_env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
                   CUTE_DSL_ARCH="sm_100a", CUTE_DSL_KEEP="ptx,cubin")  # fmt: skip
    cmd = [str(env.python), "-m", "runner.inside.subjects.base", "--in", str(params)]
    subprocess.run([*cmd, "--out", str(out)], check=True, env=run_env, timeout=900, cwd=folder)
    result: dict[str, Any] = json.loads(out.read_text())
    return result
