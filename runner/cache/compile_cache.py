"""The compile cache that survives builds: keyed by what a kernel is compiled from, computed here.

The runner, outside the sandbox, hashes the candidate's installed files (``CacheKey``, the whole
candidate) and, apart, what its kernels are compiled from (``SourceKey``: the kernel sources, the
DSL, the arch, the options), as ``runner/cache/compile_keys.py`` does; a candidate never names its
cache. Every build reads and publishes under its whole-candidate key; only a build the service
calls trusted (a commit of the configured repository built by fe-ci's own builder) publishes
under the source key, which every build may read: a develop commit that leaves the kernels alone
compiles nothing, and no upload can poison another build's kernels. Entries are files under
``<root>/published/<key>/``, owned by the runner and read-only. A determinism stage gets a fresh
directory of its own, whose folders the job's uid may add to for the stage's duration
(``jobbox.JobBox.writing``), holding hard links to its key's published entries (the inode stays
the runner's, mode 0444, so the candidate can read them and cannot write them); once the stage's
sandbox is gone and the directory is the runner's again, the runner copies the files the
candidate added, and only those, into the key's directory. An entry that exists is never
replaced. ``docs/determinism.md`` says why one build's kernels cannot serve another's.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from runner import lru
from runner.cache.compile_keys import compute_keys

log = logging.getLogger("fe_ci.compile_cache")

# Bounds on what a candidate can make the runner keep (hostile input).
MAX_NEW_FILES = 10_000
MAX_NEW_BYTES = 4 << 30

# Lock files coordinate writers within a stage; published read-only, a later stage could not open
# one for writing (the flex-attention cache takes its exclusive lock with O_WRONLY).
LOCK_SUFFIX = ".lock"


# ---------------------------------------------------------------- the store


@dataclass
class Store:
    root: Path

    def published(self, key: str) -> Path:
        return self.root / "published" / key

    def stamp(self, key: str) -> None:
        """A use of ``key``'s entries (``used/<key>``'s time): the bound keeps the newest."""
        lru.stamp(self.root / "used" / key)

    def evict(self, max_bytes: int, unused_s: float) -> list[str]:
        """Remove the least recently used keys' entries until the rest fit ``max_bytes``, none
        used within ``unused_s``: the keys removed. A stage that linked a key's entries keeps
        them (its links hold the files); the next build of the key compiles them again."""
        top = self.root / "published"
        if not top.is_dir():
            return []
        used = self.root / "used"
        entries = []
        for folder in top.iterdir():
            if not folder.is_dir() or folder.is_symlink():
                continue
            measured = lru.kept_bytes(folder, used / f"{folder.name}.bytes")
            entries.append(
                lru.Entry(folder.name, measured, lru.last_used(used / folder.name, folder))
            )

        def remove(entry: lru.Entry) -> bool:
            shutil.rmtree(top / entry.name, ignore_errors=True)
            for stamp in (used / entry.name, used / f"{entry.name}.bytes"):
                stamp.unlink(missing_ok=True)
            return True

        return lru.evict(entries, max_bytes, unused_s, remove, "compile_cache")

    def stage_dir(self) -> Path:
        """A fresh directory for one stage, in a parent only the runner can write."""
        parent = self.root / "stages"
        parent.mkdir(parents=True, exist_ok=True)
        os.chmod(parent, 0o755)
        return Path(tempfile.mkdtemp(prefix="stage-", dir=parent))

    def prepare(self, key: str, stage_dir: Path) -> int:
        """A fresh ``stage_dir`` for the candidate: links to the key's entries, room for more."""
        if stage_dir.exists():
            shutil.rmtree(stage_dir)
        stage_dir.mkdir(parents=True)
        return self.link(key, stage_dir)

    def link(self, key: str, stage_dir: Path) -> int:
        """Link ``key``'s entries into a prepared ``stage_dir`` where it has none of that name
        (the source key's, after the whole candidate's): the number linked."""
        src = self.published(key)
        linked = 0
        for here, subdirs, files in os.walk(src) if src.is_dir() else ():
            rel = Path(here).relative_to(src)
            for name in subdirs:
                if not (stage_dir / rel / name).is_dir():
                    (stage_dir / rel / name).mkdir()
            for name in files:
                target = stage_dir / rel / name
                if name.startswith(".new-") or target.exists():  # a copy cut short: no entry
                    continue
                try:
                    os.link(Path(here) / name, target)
                except FileNotFoundError:  # removed by the bound as we walked: compiled again
                    continue
                except OSError:  # another file system: a read-only copy the runner owns
                    shutil.copy2(Path(here) / name, target)
                    os.chmod(target, 0o444)
                linked += 1
        return linked

    @staticmethod
    def entries(stage_dir: Path) -> set[str]:
        """The relative paths of the files in ``stage_dir`` now (before the stage: the linked)."""
        return {
            str(Path(here, name).relative_to(stage_dir))
            for here, _subdirs, files in os.walk(stage_dir)
            for name in files
        }

    def publish(
        self, key: str, stage_dir: Path, skip: set[str] | None = None
    ) -> tuple[int, list[str]]:
        """Copy the files the stage added into the key's entries, read-only: (published, refused).

        Only regular files count (a link could point anywhere); a path already published is
        left as it is, whatever the candidate did to its own copy; a path in ``skip`` (what
        was linked in before the stage) is never published.
        """
        dest = self.published(key)
        dest.mkdir(parents=True, exist_ok=True)
        published, size, refused = 0, 0, []
        if stage_dir.is_symlink() or not stage_dir.is_dir():
            return 0, [f"{stage_dir}: not a directory"]
        for here, subdirs, files in os.walk(stage_dir):
            subdirs.sort()
            rel = Path(here).relative_to(stage_dir)
            for name in sorted(files):
                out = dest / rel / name
                if out.exists() or out.is_symlink() or name.endswith(LOCK_SUFFIX):
                    continue
                if skip is not None and str(rel / name) in skip:
                    continue
                if published >= MAX_NEW_FILES or size >= MAX_NEW_BYTES:
                    refused.append(f"{rel / name}: over {MAX_NEW_FILES} files or {MAX_NEW_BYTES} B")
                    continue
                added = self._add(Path(here) / name, out, MAX_NEW_BYTES - size)
                if isinstance(added, str):
                    refused.append(f"{rel / name}: {added}")
                    continue
                published, size = published + 1, size + added
        for here, _subdirs, _files in os.walk(dest):
            os.chmod(here, 0o755)
        if published:
            used = self.root / "used"
            used.mkdir(parents=True, exist_ok=True)
            (used / f"{key}.bytes").write_text(str(lru.folder_bytes(dest)))
        self.stamp(key)
        return published, refused

    @staticmethod
    def _add(path: Path, out: Path, room: int) -> int | str:
        """Copy one regular file to ``out`` (never replacing): its size, or why it was refused."""
        if path.is_symlink():
            return "not a regular file"
        try:  # no link followed, no FIFO waited on: checked again on the open descriptor
            src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            return f"unreadable ({exc.strerror})"
        with os.fdopen(src, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                return "not a regular file"
            if info.st_size > room:
                return "too large"
            out.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".new-")
            try:
                with os.fdopen(fd, "wb") as dst:
                    shutil.copyfileobj(fh, dst)
                os.chmod(tmp, 0o444)
                os.link(tmp, out)  # never replaces: a racing runner's entry stays
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        return info.st_size


# ---------------------------------------------------------------- one stage's cache


@dataclass
class StageCache:
    """One stage's view of the cache: its directory, its keys, what was linked in before it."""

    dir: Path
    store: Store | None = None
    key: str | None = None  # the whole candidate's
    source_key: str | None = None  # the kernel sources' (SourceKey)
    trusted: bool = False  # the service said so: the stage's new files go under both keys
    linked: int = 0
    linked_by_source: int = 0
    present: set[str] = field(default_factory=set)

    def finish(self) -> str:
        """Publish what the stage added and drop its directory: the reason's words for it."""
        if self.store is None or self.key is None:
            return ""
        published, refused = self.store.publish(self.key, self.dir)
        words = f"compile cache {self.key[:12]}: {self.linked} entries present"
        if self.source_key is not None:
            words += f" ({self.linked_by_source} by kernel sources {self.source_key[:16]})"
        words += f", {published} new published"
        if self.trusted and self.source_key is not None:
            shared, more = self.store.publish(self.source_key, self.dir, skip=self.present)
            refused += more
            words += f", {shared} under the kernel sources' key (a trusted build)"
        log.info(
            "event=compile_cache_published key=%s new=%s source_key=%s trusted=%s",
            self.key,
            published,
            self.source_key,
            self.trusted,
        )
        if refused:
            words += f", {len(refused)} refused ({refused[0]})"
        shutil.rmtree(self.dir, ignore_errors=True)
        return words


def open_stage(
    root: Path | None, dirs: list[Path], *, family: str | None, gpu: str | None, trusted: bool
) -> StageCache | None:
    """The stage's cache directory, linked to the entries of its whole-candidate key and then of
    its kernel sources' key (every build reads both); None without a root or a candidate."""
    keys = compute_keys(dirs, family=family, gpu=gpu) if root is not None else None
    if root is None or keys is None:
        return None
    store = Store(root)
    cache = StageCache(
        dir=store.stage_dir(),  # a parent the candidate cannot swap for a link
        store=store,
        key=keys[0].digest(),
        source_key=keys[1].digest(),
        trusted=trusted,
    )
    assert cache.key is not None and cache.source_key is not None
    cache.linked = store.prepare(cache.key, cache.dir)
    cache.linked_by_source = store.link(cache.source_key, cache.dir)
    for key in (cache.key, cache.source_key):
        if store.published(key).is_dir():
            store.stamp(key)
    cache.linked += cache.linked_by_source
    cache.present = Store.entries(cache.dir)
    log.info(
        "event=compile_cache_prepared key=%s entries=%s source_key=%s by_source=%s trusted=%s",
        cache.key,
        cache.linked,
        cache.source_key,
        cache.linked_by_source,
        trusted,
    )
    return cache
