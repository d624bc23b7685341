"""A repository's commits: a bare mirror per repository URL, the commits in it, their history.

The builder runner exports a commit's tree from the mirror to build it; the service reads the
ancestry between two commits to bisect. Git runs as a child process with a timeout and a log;
nothing here runs a repository's own code.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

# A full commit id, as git prints it: the one pattern the service's doors, the commands and the
# mirrors check a commit against (whole-string: a trailing newline is not a commit).
FULL_SHA = "[0-9a-f]{40}"
_SHA = re.compile(FULL_SHA)


def is_full_sha(text: str) -> bool:
    """Whether ``text`` is a full, lower-case commit id."""
    return _SHA.fullmatch(text) is not None


TAIL_BYTES = 4000


class BuildFailure(Exception):
    def __init__(self, kind: str, message: str, log_tail: str = "") -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.log_tail = log_tail


def _tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def mirror_path(cache_dir: Path, repo_url: str) -> Path:
    digest = hashlib.sha256(repo_url.encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", repo_url.rstrip("/").rsplit("/", 1)[-1]) or "repo"
    return cache_dir / "mirrors" / f"{digest}-{name}"


def _git(args: list[str], *, log: Path, timeout: float = 900, cwd: Path | None = None) -> bool:
    """Run git, its output appended to ``log``; False when it fails or outlasts ``timeout``."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        try:
            proc = subprocess.run(
                ["git", *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            fh.write(f"git {args[0]}: killed after {timeout:.0f} s\n".encode())
            return False
    return proc.returncode == 0


def _has_commit(mirror: Path, sha: str) -> bool:
    probe = subprocess.run(
        ["git", "-C", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"],
        capture_output=True,
    )
    return probe.returncode == 0


def ensure_commit(repo_url: str, sha: str, cache_dir: Path, log: Path) -> Path:
    """The mirror holding ``sha``, fetching it when missing. Raises ``BuildFailure``."""
    if not is_full_sha(sha):
        raise BuildFailure("unknown_commit", f"{sha!r} is not a 40-hex commit")
    mirror = mirror_path(cache_dir, repo_url)
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        tmp = mirror.with_name(mirror.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if not _git(["clone", "--mirror", "--quiet", repo_url, str(tmp)], log=log):
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildFailure("fetch_failed", f"cannot clone {repo_url}", _tail(log))
        tmp.rename(mirror)
    if _has_commit(mirror, sha):
        return mirror
    fetched = _git(["-C", str(mirror), "fetch", "--quiet", "--prune", "origin"], log=log)
    if not _has_commit(mirror, sha):  # not on any ref: ask for the commit itself
        fetched = _git(["-C", str(mirror), "fetch", "--quiet", "origin", sha], log=log) or fetched
    if _has_commit(mirror, sha):
        return mirror
    if not fetched:
        raise BuildFailure("fetch_failed", f"cannot fetch from {repo_url}", _tail(log))
    raise BuildFailure("unknown_commit", f"{repo_url} has no commit {sha}", _tail(log))


def export_tree(mirror: Path, sha: str, dest: Path) -> Path:
    """The commit's tree, without .git, in ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = dest.parent / f"{sha}.tar"
    try:
        with open(archive, "wb") as fh:
            proc = subprocess.run(
                ["git", "-C", str(mirror), "archive", "--format=tar", sha],
                stdout=fh,
                stderr=subprocess.PIPE,
                timeout=600,
            )
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()[:300]
            raise BuildFailure("git_failed", f"git archive {sha}: {err}")
        if _is_empty_tree(mirror, sha):
            raise BuildFailure("empty_tree", f"commit {sha} has no files: nothing to build")
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    finally:
        archive.unlink(missing_ok=True)
    return dest


def _is_empty_tree(mirror: Path, sha: str) -> bool:
    out = subprocess.run(
        ["git", "-C", str(mirror), "ls-tree", "--name-only", sha],
        capture_output=True,
        timeout=120,
    )
    return out.returncode == 0 and not out.stdout.strip()


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str


def _git_out(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise BuildFailure("git_failed", f"git {' '.join(args[:2])}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def ancestry_path(repo: Path, good: str, bad: str) -> list[str]:
    """``git rev-list --ancestry-path --reverse GOOD..BAD``: oldest first, ``bad`` last."""
    for sha in (good, bad):
        if not is_full_sha(sha):
            raise BuildFailure("unknown_commit", f"{sha!r} is not a 40-hex commit")
    out = _git_out(repo, "rev-list", "--ancestry-path", "--reverse", f"{good}..{bad}")
    return out.split()


def commit_info(repo: Path, sha: str) -> CommitInfo:
    """The commit's subject line and author (``Name <email>``)."""
    out = _git_out(repo, "show", "-s", "--format=%H%n%s%n%an <%ae>", sha).splitlines()
    if len(out) < 3:
        raise BuildFailure("unknown_commit", f"no commit {sha}")
    return CommitInfo(sha=out[0], subject=out[1][:300], author=out[2][:200])


def resolve_rev(repo: Path, rev: str) -> str:
    """A revision of a local repository (``HEAD~3``, a branch, a short sha) as its 40-hex sha."""
    if rev.startswith("-"):
        raise BuildFailure("unknown_commit", f"{rev!r} is not a revision")
    return _git_out(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
