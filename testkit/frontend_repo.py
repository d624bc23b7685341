"""A real git repository of a small frontend-shaped package: ``nvidia-cudnn-frontend``, pure Python,
no CUDA, built into wheels by the real builder path (setuptools, ``pip wheel``). Its ``cudnn``
package has the dSReLU grouped-GEMM wrapper with or without the ``deterministic`` knob, which is
what the probe reads; everything else of the frontend is absent (the probe says not applicable).
It reports version 1.4.0, older than the features of the ledger it lacks, so a build with the knob
is green but for a ``feature_predates_version`` warning, and the knob's removal is the one error.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

AUTHOR = "Ada Lovelace"
EMAIL = "ada@example.org"

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "nvidia-cudnn-frontend"
version = "{version}"
requires-python = ">=3.9"

[tool.setuptools.packages.find]
include = ["cudnn*"]
"""

INIT = '''\
"""A frontend-shaped package for tests: commit {n}."""

__version__ = "{version}"


def grouped_gemm_dsrelu_wrapper_sm100(a, b, c, prob, *, act_func="srelu"{knob}):
    raise RuntimeError("no sm_100 GPU in this package")
'''

# A setup.py that fails the way a broken build does: the builder reports it and the commit is
# skipped by a bisection.
BROKEN_SETUP = (
    "import sys\nprint('error: this commit does not build', file=sys.stderr)\nsys.exit(1)\n"
)


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": AUTHOR,
        "GIT_AUTHOR_EMAIL": EMAIL,
        "GIT_COMMITTER_NAME": AUTHOR,
        "GIT_COMMITTER_EMAIL": EMAIL,
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def init(repo: Path) -> Path:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "develop")
    return repo


def commit(repo: Path, n: int, *, knob: bool, builds: bool = True, version: str = "1.4.0") -> str:
    """Commit ``n`` of the package: with or without the knob, buildable or not. Returns its sha."""
    pkg = repo / "cudnn"
    pkg.mkdir(exist_ok=True)
    (repo / "pyproject.toml").write_text(PYPROJECT.format(version=version))
    (pkg / "__init__.py").write_text(
        INIT.format(n=n, version=version, knob=", deterministic=None" if knob else "")
    )
    setup = repo / "setup.py"
    if builds:
        setup.unlink(missing_ok=True)
    else:
        setup.write_text(BROKEN_SETUP)
    subject = f"commit {n}: " + ("keeps the knob" if knob else "drops the deterministic knob")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject + ("" if builds else " (breaks the build)"))
    return git(repo, "rev-parse", "HEAD")


def history(
    repo: Path, count: int = 10, *, removed_at: int = 6, unbuildable: frozenset[int] = frozenset()
) -> list[str]:
    """Commits 1..count; the knob is gone from ``removed_at`` on. Returns the shas, oldest first."""
    init(repo)
    return [
        commit(repo, n, knob=n < removed_at, builds=n not in unbuildable)
        for n in range(1, count + 1)
    ]
