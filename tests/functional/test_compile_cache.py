"""The compile cache across builds: its key (runner/cache/compile_keys.py), and what a candidate can
and cannot do to it (runner/cache/compile_cache.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire import Stage
from runner.cache import compile_cache, compile_keys
from runner.isolation import candidate, jail, zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit.registry import candidate_env
from testkit.wheels import make_wheel

KERNEL = "import cutlass\nimport cutlass.cute as cute\n\n@cute.kernel\ndef k():\n    pass\n"


def _dist_info(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    """Install ``files`` into ``site`` the way pip leaves them: the files plus a dist-info."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    record = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    _dist_info(
        site,
        "nvidia-cudnn-frontend",
        "1.32.0",
        {
            "cudnn/__init__.py": '__version__ = "1.32.0"\nfrom cudnn import kernels\n',
            "cudnn/kernels/attention.py": KERNEL,
            "cudnn/README.md": "docs\n",
        },
    )
    _dist_info(site, "nvidia-cutlass-dsl", "4.8.1", {"cutlass/__init__.py": "# dsl\n"})
    _dist_info(site, "unrelated", "1.0", {"unrelated/__init__.py": "x = 1\n"})
    return site


def _key(site: Path, family: str = "sm_90") -> str:
    found = compile_keys.compute_keys([site], family=family, gpu="NVIDIA H200")
    assert found is not None
    return found[0].digest()


def test_the_key_follows_the_kernel_sources_and_nothing_a_candidate_names(site: Path) -> None:
    first = _key(site)
    kernel = site / "cudnn/kernels/attention.py"
    kernel.write_text(KERNEL + "# one more line\n")
    assert _key(site) != first  # a kernel source changed
    kernel.write_text(KERNEL)
    assert _key(site) == first
    # a re-labelled build: the version in the metadata and in __version__ say 1.33.0
    info = site / "nvidia_cudnn_frontend-1.32.0.dist-info"
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-cudnn-frontend\nVersion: 1.33.0\n"
    )
    init = site / "cudnn/__init__.py"
    init.write_text(init.read_text().replace("1.32.0", "1.33.0"))
    # and files that are not the candidate's: another distribution
    (site / "unrelated/__init__.py").write_text("x = 2\n")
    assert _key(site) == first
    # a file on disk the RECORD does not list is still hashed
    (site / "cudnn/kernels/extra.py").write_text("import cutlass\n")
    assert _key(site) != first
    (site / "cudnn/kernels/extra.py").unlink()
    assert _key(site) == first
    # the compiler and the arch are part of what a kernel is
    assert _key(site, family="sm_100") != first
    (site / "nvidia_cutlass_dsl-4.8.1.dist-info/RECORD").write_text("cutlass/__init__.py,,x\n")
    assert _key(site) != first


@pytest.mark.parametrize(
    "line",
    [
        '__version__ = "1.32.0"; import os',  # another statement after the label
        '__version__ = "1.32.0" if __import__("os") else ""',
        '__version__: str = "1.32.0"',  # an annotation
        '    __version__ = "1.32.0"',  # indented: inside whatever block precedes it
        '__version__ = "1.32.0"  # a comment',
        '__version__ = "1.32" ".0"',
        '__version__ = "1.32.0"\r',
        '__version__ = f"1.32.0"',
    ],
)
def test_a_version_line_that_does_more_than_label_is_hashed_as_it_is(site: Path, line: str) -> None:
    """Only an exact string literal assignment on a line of its own is a label; a line with
    anything more keys like any other code, so a wheel cannot borrow the genuine build's key."""
    init = site / "cudnn/__init__.py"
    genuine = init.read_bytes()
    first = _key(site)
    init.write_bytes(genuine.replace(b'__version__ = "1.32.0"', b'__version__ = "9.9.9"'))
    assert _key(site) == first  # a plain re-label keeps the key, either quote
    init.write_bytes(genuine.replace(b'"1.32.0"', b"'1.32.0'"))
    assert _key(site) == first
    init.write_bytes(genuine.replace(b'__version__ = "1.32.0"', line.encode()))
    assert _key(site) != first


def test_byte_code_counts(site: Path) -> None:
    """A candidate is installed without byte-compiling: a ``.pyc`` it ships is what runs."""
    first = _key(site)
    cache = site / "cudnn/__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"\0")
    assert _key(site) != first
    (cache / "__init__.cpython-311.pyc").unlink()
    assert _key(site) == first
    (site / "cudnn/kernels/stray.pyc").write_bytes(b"\0")
    assert _key(site) != first


def test_entry_points_count(site: Path) -> None:
    """Entry points choose what runs (torch calls its ``torch.backends`` group's at import)."""
    first = _key(site)
    info = site / "nvidia_cudnn_frontend-1.32.0.dist-info"
    (info / "entry_points.txt").write_text("[torch.backends]\nx = cudnn.kernels:attention\n")
    assert _key(site) != first


def test_both_digests_of_one_walk_are_the_documented_hashes(site: Path) -> None:
    """The whole-candidate and kernel-source digests come from one walk that reads each file
    once; each is still the sha256 of its files in path order (``F <rel> <len>\\0`` then the
    bytes, the version line as a label) then its entry points, so a cache keyed before keeps
    its entries. The native module counts in the first only."""
    (site / "cudnn/_graph.so").write_bytes(b"\x7fELF native")
    (dist,) = compile_keys.md.distributions(name=compile_keys.CANDIDATE_DIST, path=[str(site)])
    files = {
        "cudnn/README.md": b"docs\n",
        "cudnn/__init__.py": b"__version__ = <label>\nfrom cudnn import kernels\n",
        "cudnn/_graph.so": b"\x7fELF native",
        "cudnn/kernels/attention.py": KERNEL.encode(),
    }

    def by_hand(skip: tuple[str, ...]) -> str:
        h = hashlib.sha256()
        for rel, data in sorted(files.items()):
            if not rel.endswith(skip) or not skip:
                h.update(f"F {rel} {len(data)}\0".encode() + data)
        h.update(b"E 0\0")  # no entry points
        return h.hexdigest()

    whole, kernels = compile_keys.source_digests(dist, [(), compile_keys.NOT_KERNEL_SOURCES])
    assert whole == compile_keys.source_digest(dist) == by_hand(())
    assert kernels == by_hand(compile_keys.NOT_KERNEL_SOURCES) != whole


@pytest.mark.slow  # the registry's 1.32.0 installed the runner's way (cached after the first run)
def test_the_genuine_release_keeps_its_key_relabelled_and_loses_it_extended(
    tmp_path: Path,
) -> None:
    """On the real 1.32.0: its version line is the exact literal the key takes for a label."""
    real = candidate_env("1.32.0").site_packages()
    site = tmp_path / "site"
    for name in ("cudnn", "nvidia_cudnn_frontend-1.32.0.dist-info"):
        shutil.copytree(real / name, site / name)
    (dist,) = compile_keys.md.distributions(name=compile_keys.CANDIDATE_DIST, path=[str(site)])
    first = compile_keys.source_digest(dist)
    init = site / "cudnn/__init__.py"
    genuine = init.read_bytes()
    assert genuine.count(b'\n__version__ = "1.32.0"\n') == 1
    init.write_bytes(genuine.replace(b'"1.32.0"', b'"1.33.0"'))
    assert compile_keys.source_digest(dist) == first
    init.write_bytes(genuine.replace(b'"1.32.0"', b'"1.32.0"; import os'))
    assert compile_keys.source_digest(dist) != first


def test_no_candidate_no_key(tmp_path: Path) -> None:
    assert compile_keys.compute_keys([tmp_path], family="sm_90", gpu=None) is None


def test_publish_adds_only_new_regular_files_read_only(tmp_path: Path) -> None:
    store = compile_cache.Store(tmp_path / "cache")
    stage = store.stage_dir()
    assert store.prepare("k", stage) == 0
    (stage / "cute").mkdir()
    (stage / "cute/a.bin").write_bytes(b"first")
    (stage / "cute/a.lock").write_bytes(b"")  # a writer's lock: the next stage makes its own
    (stage / "cute/link").symlink_to("/etc/hostname")
    published, refused = store.publish("k", stage)
    assert published == 1 and refused == ["cute/link: not a regular file"]
    entry = store.published("k") / "cute/a.bin"
    assert entry.read_bytes() == b"first" and stat.S_IMODE(entry.stat().st_mode) == 0o444
    assert not (store.published("k") / "cute/a.lock").exists()
    # the next stage of the key sees the entry; replacing its own copy publishes nothing
    again = store.stage_dir()
    assert store.prepare("k", again) == 1
    (again / "cute/a.bin").unlink()
    (again / "cute/a.bin").write_bytes(b"second")
    assert store.publish("k", again) == (0, [])
    assert entry.read_bytes() == b"first"


HOSTILE = """\
import os, pathlib
_d = os.environ.get("CUTE_DSL_CACHE_DIR")
if _d:
    _root = pathlib.Path(_d)
    _k = _root / "kernel.bin"
    _log = []
    def _try(what, fn):
        try:
            fn()
            _log.append(what + " done")
        except OSError:
            _log.append(what + " denied")
    if _k.exists():
        _log.append("saw " + _k.read_text())
        _try("write", lambda: _k.write_text("evil"))
        _try("append", lambda: open(_k, "a").write("evil"))
        _try("chmod", lambda: os.chmod(_k, 0o666))
        _other = "OTHER_ENTRY"
        _try("other-write", lambda: open(_other, "w").write("evil"))
        _try("other-create", lambda: open(_other + ".evil", "w").write("evil"))
        _try("replace", lambda: (_k.unlink(), _k.write_text("evil")))
    else:
        _k.write_text("good")
    _n = len(list(_root.glob("log-*.txt")))
    (_root / f"log-{_n}.txt").write_text("\\n".join(_log))
"""


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[zygotes.Zygotes]:
    """The runner's warm parents: the builds' probes are forks of one, torch already imported."""
    zs = zygotes.Zygotes(tmp_path / "zygotes")
    yield zs
    zs.close()


@pytest.mark.skipif(
    not jail.mechanism().uid_drop,
    reason="needs a runner that is root: only then does the candidate run as the job's uid",
)
def test_a_candidate_cannot_write_an_entry_it_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: zygotes.Zygotes
) -> None:
    """A fake candidate (its ``cudnn`` is hostile code, run at import in the determinism stage)
    attacks the cache through three builds of the same sources; the stages really run sandboxed,
    installed the warm way a runner installs them (on a layer: the wheel declares torch alone, the
    host's), their probes forked from the layer's zygote."""
    for name in candidate.RUNNER_OWNED_ENV:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "cache"
    store = compile_cache.Store(root)
    # an entry of another key, published by the runner
    other_stage = store.stage_dir()
    store.prepare("zz-other-key", other_stage)
    (other_stage / "x.bin").write_text("theirs")
    store.publish("zz-other-key", other_stage)
    shutil.rmtree(other_stage)
    other = store.published("zz-other-key") / "x.bin"
    hostile = HOSTILE.replace("OTHER_ENTRY", str(other))
    wheel = make_wheel(tmp_path / "wheels", "1.32.0", hostile, requires=("torch",))

    def build(n: int) -> str:
        opts = pipeline_options.Options(
            stages=[Stage.determinism],
            work_dir=tmp_path / f"job{n}",
            layers_dir=tmp_path / "layers",
            zygotes=pool,
            compile_cache_dir=root,
            family="sm_90",
            gpu="NVIDIA H200",
            report_unselected=False,
        )
        result = pipeline.Pipeline(opts).run(wheel)
        (det,) = [s for s in result.stages if s.name == Stage.determinism]
        assert "compile cache" in det.reason, det.reason
        return det.reason

    build(1)  # writes kernel.bin: a new entry, published read-only
    (key_dir,) = (root / "published").glob("[0-9a-f]*")
    entry = key_dir / "cute/kernel.bin"
    assert entry.read_text() == "good" and stat.S_IMODE(entry.stat().st_mode) == 0o444
    build(2)  # tries to change it, and another key's entry
    attempts = (key_dir / "cute/log-1.txt").read_text().splitlines()
    assert attempts == [
        "saw good",
        "write denied",
        "append denied",
        "chmod denied",
        "other-write denied",
        "other-create denied",
        "replace done",  # its own copy, in its own directory: never published over the entry
    ]
    assert entry.read_text() == "good" and other.read_text() == "theirs"
    assert not Path(f"{other}.evil").exists()
    build(3)  # the build that follows sees the entry as the first build wrote it
    assert (key_dir / "cute/log-2.txt").read_text().splitlines()[0] == "saw good"
    assert sorted(os.listdir(root / "stages")) == []  # stage directories are not kept


def _published(store: compile_cache.Store, key: str, tmp_path: Path, age_s: float) -> None:
    """``key``'s entries as a stage publishes them: a kernel file; its last use ``age_s`` ago."""
    stage = tmp_path / f"stage-{key}"
    (stage / "flex").mkdir(parents=True)
    (stage / "flex" / f"{key}.o").write_bytes(key.encode() * 1000)
    assert store.publish(key, stage) == (1, [])
    past = time.time() - age_s
    os.utime(store.root / "used" / key, (past, past))


def test_past_its_budget_the_least_recently_used_keys_go_and_a_stage_keeps_its_links(
    tmp_path: Path,
) -> None:
    """Each upload with kernel sources of its own adds a key (up to ``MAX_NEW_BYTES``): the
    cache is bounded like the layers. A stage that linked a key's entries before it went still
    reads them (the links hold the files); the next build of the key compiles again."""
    store = compile_cache.Store(tmp_path / "cache")
    for key, age in (("old", 86_400.0), ("mid", 7_200.0), ("new", 0.0)):
        _published(store, key, tmp_path, age)
    assert (store.root / "used" / "old.bytes").read_text() == str(len(b"old") * 1000)
    running = store.stage_dir()
    assert store.prepare("old", running) == 1
    assert store.evict(10_000, unused_s=3600) == []  # 9,000 bytes fit
    assert store.evict(3_000, unused_s=3600) == ["old", "mid"]  # "new" used within the hour
    assert sorted(p.name for p in (store.root / "published").iterdir()) == ["new"]
    assert (running / "flex" / "old.o").read_bytes() == b"old" * 1000
    assert store.evict(1, unused_s=3600) == []  # over the budget, and kept: used lately
    again = store.stage_dir()
    assert store.prepare("old", again) == 0  # gone: compiled again


def test_a_key_going_while_a_stage_links_it_costs_the_stage_those_entries_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = compile_cache.Store(tmp_path / "cache")
    _published(store, "key", tmp_path, 0.0)
    real_link = os.link

    def vanished(src: str | Path, dst: str | Path) -> None:
        os.unlink(src)  # the bound removed it between the walk and the link
        real_link(src, dst)

    monkeypatch.setattr(compile_cache.os, "link", vanished)
    assert store.prepare("key", store.stage_dir()) == 0
