"""One job's place on the host: its directory, its uid, and the sandboxes its processes run in.

The job's directory stays the runner's (parameters, logs, the environment once installed); only
``own`` (``<work>/box``: the candidate's HOME and TMPDIR, the documents its stages write) is handed
to the job's uid, plus, for one process at a time, what that process must write (the environment
while an installer fills it, a compile-cache stage directory). Each is taken back once the process
has ended (``uids.take_back``): nothing the job's uid wrote can be changed by it afterwards.

A stage sees ``/`` read-only with the runner's private directories (its home, its cache and data
directories) hidden, and shown again read-only only what it reads: the job's directory, the
runner's interpreter, the dependency layer, the host's torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.envs import host
from runner.isolation import allowlist, jail, uids


@dataclass
class JobBox:
    work: Path
    uid: int | None
    hidden: tuple[Path, ...] = ()  # the runner's private directories
    ro: tuple[Path, ...] = ()  # what the job reads outside its directory

    @property
    def own(self) -> Path:
        """The candidate's writable part of the job's directory."""
        return self.work / "box"

    @property
    def home(self) -> Path:
        return self.own / "home"

    def prepare(self) -> None:
        """The job's directory, the runner's; ``own`` in it, the job uid's."""
        self.work.mkdir(parents=True, exist_ok=True)
        for runner_owned in (self.work, self.work / "params", self.work / "logs"):
            runner_owned.mkdir(exist_ok=True)
            if os.geteuid() == 0:
                os.chown(runner_owned, 0, 0)
        os.chmod(self.work, 0o755)
        os.chmod(self.work / "logs", 0o700)
        uids.hand_over(self.own, self.uid)
        uids.hand_over(self.home, self.uid)
        jail.make_reachable(self.own)

    def box(self, *rw: Path, network: bool = False, ro: tuple[Path, ...] = ()) -> jail.Box:
        """The sandbox of one process of this job: ``own`` and ``rw`` writable, no network but
        for an installer."""
        shown = (self.work, *self.ro, *ro, *_torch(), *jail.runner_paths())
        hidden = (*self.hidden, *jail.private_paths())
        return jail.Box(
            uid=self.uid,
            rw=(self.own, *rw),
            ro=shown,
            hidden=hidden,
            network=network,
            cwd=self.own,
        )

    def environ(self, kind: allowlist.Kind, bin_dir: Path) -> dict[str, str]:
        """The whole environment of an installer or a build of this job (``allowlist.py``)."""
        return allowlist.candidate_environ(kind, home=self.home, path=[bin_dir])

    @contextlib.contextmanager
    def writing(self, *paths: Path, files: bool = False) -> Iterator[None]:
        """Hand ``paths`` (existing directory trees; with ``files``, their files too) to the job's
        uid for one process, and take them back after it, whatever happened."""
        for path in paths:
            uids.hand_over_tree(path, self.uid, files=files)
            jail.make_reachable(path)
        try:
            yield
        finally:
            if self.uid is not None:
                uids.reap(self.uid)  # a process left behind where no pid namespace took it
            for path in paths:
                uids.take_back(path)


def _torch() -> tuple[Path, ...]:
    torch = host.host_torch()
    return (torch.site_dir,) if torch is not None else ()


def interpreter_dirs(python: Path) -> tuple[Path, ...]:
    """What a candidate's interpreter outside the job (``--preinstalled``) needs to be seen."""
    if python == Path(sys.executable):
        return ()
    real = Path(os.path.realpath(python))
    return (python.parent.parent, real.parent.parent)


@contextlib.contextmanager
def temporary(
    work: Path, uid_range: uids.UidRange | None = None, hidden: tuple[Path, ...] = ()
) -> Iterator[JobBox]:
    """A job of its own for work outside a pipeline (a dependency layer built on its own, a
    commit's build): ``work`` its directory, a uid of the range while it lasts."""
    with (uid_range or uids.UidRange.default()).lease() as uid:
        job = JobBox(work, uid, hidden=hidden)
        job.prepare()
        try:
            yield job
        finally:  # the uid serves another job later: nothing of this one keeps it
            if uid is not None:
                uids.reap(uid)
            uids.take_back(job.own)


def link_tree(src: Path, dest: Path) -> None:
    """``dest`` holding what ``src`` holds: hard links to its files (a copy across file systems),
    links as links. The files stay the runner's: the stage reads them and cannot change them."""
    for here, dirs, files in os.walk(src):
        rel = Path(here).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in [*files, *(d for d in dirs if (Path(here) / d).is_symlink())]:
            path = Path(here) / name
            if path.is_symlink():
                os.symlink(os.readlink(path), dest / rel / name)
                continue
            try:
                os.link(path, dest / rel / name)
            except OSError:
                shutil.copy2(path, dest / rel / name)
