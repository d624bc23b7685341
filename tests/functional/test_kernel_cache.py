"""Compiled kernels keyed on their sources, and who may publish under that key.

The runner's pipeline runs for real (install, sandbox, the determinism stage, the compile cache's
store), the warm way a long-running runner runs it: each build installed on a dependency layer
(the candidates declare torch alone, the host's, so the layer holds nothing of its own) and its
probe forked from the layer's zygote. The candidates are constructed frontend wheels whose
``cudnn`` package, imported by the stage, behaves as the CuTe DSL does: it names a compiled
kernel by a digest of its source, reads it from the cache directory when it is there, and
compiles (writes) it when it is not. A double, because the real kernels compile in minutes on
this 2-core host; ``test_subjects.py`` compiles the real ones for sm_100a. The service's side
(who is trusted) runs through a real service.
"""

from __future__ import annotations

import importlib.util
import py_compile
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire import Stage
from runner.isolation import zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit import loopback
from testkit.service import Service
from testkit.wheels import dist_info, frontend_members, wheel_bytes, wheel_name
from tests.helpers import register, submit_wheel

COMPILER = """\
import hashlib, os, pathlib
_here = pathlib.Path(__file__).parent
_root = os.environ.get("CUTE_DSL_CACHE_DIR")
if _root:
    _source = (_here / "kernels" / "attention.py").read_bytes()
    _label = (_here / "_compiled_module.so").read_text()
    _entry = pathlib.Path(_root) / f"kernel-{hashlib.sha256(_source).hexdigest()[:12]}.bin"
    if _entry.exists():
        _seen = "reused, " + _entry.read_text()
    else:
        _entry.write_text("compiled by " + _label)
        _seen = "compiled"
    (pathlib.Path(_root) / f"seen-{_label}.txt").write_text(_seen)
"""
KERNEL = "import cutlass\n\n@cute.kernel\ndef attention():\n    pass\n"


def candidate(
    dest: Path,
    label: str,
    kernel: str = KERNEL,
    readme: str = "docs\n",
    *,
    init: str = COMPILER,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A frontend wheel: the compiler above, a kernel source, a native extension that says which
    build it is (a C++ change gives every commit a new one) and prose."""
    version = "1.32.0"
    members = frontend_members(version, init, ("torch",))
    members.update(extra or {})
    members["cudnn/kernels/attention.py"] = kernel.encode()
    members["cudnn/_compiled_module.so"] = label.encode()
    members["cudnn/README.md"] = readme.encode()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / wheel_name(version)
    path.write_bytes(wheel_bytes(members, record=dist_info(version)))
    return path


@pytest.fixture
def pool(cache_dir: str) -> Iterator[zygotes.Zygotes]:
    """The runner's warm parents: the builds' probes are forks of one, torch already imported."""
    zs = zygotes.Zygotes(Path(cache_dir) / "zygotes")
    yield zs
    zs.close()


def run(root: Path, work: Path, wheel: Path, *, trusted: bool, pool: zygotes.Zygotes) -> str:
    """One determinism stage of ``wheel`` against the cache at ``root``: its reason."""
    opts = pipeline_options.Options(
        stages=[Stage.determinism],
        work_dir=work,
        layers_dir=root.parent / "layers",
        zygotes=pool,
        compile_cache_dir=root,
        family="sm_90",
        gpu="NVIDIA H200",
        report_unselected=False,
        trusted_source=trusted,
    )
    result = pipeline.Pipeline(opts).run(wheel)
    (det,) = [s for s in result.stages if s.name == Stage.determinism]
    assert "compile cache" in det.reason, det.reason
    return det.reason


def seen(root: Path, label: str) -> tuple[str, list[str]]:
    """What the build ``label`` found, and the keys its record was published under."""
    found = sorted((root / "published").glob(f"*/cute/seen-{label}.txt"))
    assert found, label
    return found[0].read_text(), sorted(p.parent.parent.name for p in found)


def by_source(root: Path) -> list[Path]:
    return sorted((root / "published").glob("src-*"))


def test_kernels_are_shared_by_source_and_only_trusted_builds_publish_there(
    cache_dir: str, pool: zygotes.Zygotes
) -> None:
    root, work = Path(cache_dir) / "compile-cache", Path(cache_dir) / "jobs"
    changed = KERNEL.replace("pass", "return 1")
    # a develop commit, built by the builder: compiles, publishes under both keys
    run(root, work / "a", candidate(work / "wa", "commit-a"), trusted=True, pool=pool)
    assert seen(root, "commit-a")[0] == "compiled"
    (shared,) = by_source(root)
    assert [p.name for p in (shared / "cute").glob("kernel-*")]
    # the next commit changed only C++ and docs: a new whole-candidate key, the same sources
    reason = run(
        root,
        work / "b",
        candidate(work / "wb", "commit-b", readme="more\n"),
        trusted=True,
        pool=pool,
    )
    assert seen(root, "commit-b")[0] == "reused, compiled by commit-a"
    assert "by kernel sources src-" in reason and "(0 by kernel sources" not in reason
    # an upload with other kernel sources compiles, and publishes under its own key only
    reason = run(
        root, work / "u", candidate(work / "wu", "upload-u", changed), trusted=False, pool=pool
    )
    text, keys = seen(root, "upload-u")
    assert text == "compiled" and len(keys) == 1 and not keys[0].startswith("src-")
    assert "kernel sources' key" not in reason
    assert by_source(root) == [shared]  # nothing under its sources' key
    # a commit with the upload's kernel sources does not get the upload's kernel: it compiles
    run(root, work / "c", candidate(work / "wc", "commit-c", changed), trusted=True, pool=pool)
    assert seen(root, "commit-c")[0] == "compiled"
    assert len(by_source(root)) == 2
    # an upload of the first commit's sources reads the shared kernel, and adds nothing there
    before = sorted(p.name for p in (shared / "cute").iterdir())
    run(root, work / "u2", candidate(work / "wu2", "upload-u2"), trusted=False, pool=pool)
    text, keys = seen(root, "upload-u2")
    assert text == "reused, compiled by commit-a" and not any(k.startswith("src-") for k in keys)
    assert sorted(p.name for p in (shared / "cute").iterdir()) == before


def test_the_service_trusts_only_commits_its_own_builder_built(
    make_service, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    svc: Service = make_service()
    upload = submit_wheel(svc, candidate(tmp_path / "w", "upload"))
    with svc.http() as http:
        resp = http.post("/validate", json={"commit": "a" * 40})
    assert resp.status_code == 202, resp.text
    commit = int(resp.json()["build_id"])
    builder = register(svc, "builder", builder="1")
    worker = register(svc, "cpu-1")
    first = worker.post("/api/jobs/claim", json={}).json()
    assert (first["build_id"], first["trusted_source"]) == (upload, False)  # an upload
    build = builder.post("/api/jobs/claim", json={}).json()
    assert (build["kind"], build["build_id"]) == ("build", commit)
    wheel = candidate(tmp_path / "built", "commit")
    with wheel.open("rb") as fh:
        resp = builder.post(
            build["artifact_url"],
            files={"wheel": (wheel.name, fh, "application/octet-stream")},
            headers={"X-Lease-Token": build["lease_token"], "X-Python-Tag": "cp311"},
        )
    assert resp.status_code == 201, resp.text
    builder.post(f"/api/jobs/{build['job_id']}/finish", json={"lease_token": build["lease_token"]})
    second = worker.post("/api/jobs/claim", json={}).json()
    assert (second["build_id"], second["trusted_source"]) == (commit, True)
    # the lease is the service's word: nothing a runner or a submitter sends changes it
    assert loopback.get(f"{svc.url}/api/builds/{commit}").json()["source"] == "commit"


GENUINE = '__version__ = "1.32.0"\n' + COMPILER
# before the compiler runs, the attack writes the entry the genuine build would compile
PLANT = (
    "import hashlib, os, pathlib\n"
    "_d = os.environ.get('CUTE_DSL_CACHE_DIR')\n"
    "_s = (pathlib.Path(__file__).parent / 'kernels' / 'attention.py').read_bytes()\n"
    "if _d: (pathlib.Path(_d) / f'kernel-{hashlib.sha256(_s).hexdigest()[:12]}.bin')"
    ".write_text('POISONED: planted by another wheel')\n"
)


def poisoner(dest: Path, how: str) -> Path:
    """An upload whose every file is the genuine build's (its native module says "genuine" too),
    but for what runs first: the version line extended with the plant, or the genuine source
    with a shipped unchecked-hash ``.pyc`` of the plant (installed without byte-compiling,
    Python runs it without reading the source)."""
    if how == "version line":
        return candidate(
            dest, "genuine", init=f'__version__ = "1.32.0"; exec({PLANT!r})\n' + COMPILER
        )
    source = dest / "poison" / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text(PLANT + COMPILER)
    tag = importlib.util.cache_from_source("__init__.py").split("/")[-1]
    pyc = py_compile.compile(
        str(source),
        cfile=str(dest / "poison" / tag),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    extra = {f"cudnn/__pycache__/{tag}": Path(pyc).read_bytes()}
    return candidate(dest, "genuine", init=GENUINE, extra=extra)


def stage_key(reason: str) -> tuple[str, int]:
    """The whole-candidate key a stage's cache had (its first 12 digits), and how many entries
    were linked in for it."""
    found = re.search(r"compile cache ([0-9a-f]{12}): (\d+) entries present", reason)
    assert found, reason
    return found[1], int(found[2])


def kernel_under(root: Path, key: str) -> str:
    (entry,) = (root / "published").glob(f"{key}*/cute/kernel-*.bin")
    return entry.read_text()


@pytest.mark.parametrize("how", ["version line", "byte code"])
def test_an_upload_cannot_poison_a_genuine_builds_kernels(
    cache_dir: str, pool: zygotes.Zygotes, how: str
) -> None:
    """The poisoned rerun: an upload that borrowed the genuine 1.32.0's key published the entry
    the genuine build then reused. Now its key is its own: the genuine build compiles."""
    root, work = Path(cache_dir) / "compile-cache", Path(cache_dir) / "jobs"
    attack, _ = stage_key(
        run(root, work / "p", poisoner(work / "wp", how), trusted=False, pool=pool)
    )
    assert kernel_under(root, attack) == "POISONED: planted by another wheel"  # the attack ran
    genuine = candidate(work / "wg", "genuine", init=GENUINE)
    key, linked = stage_key(run(root, work / "g", genuine, trusted=False, pool=pool))
    assert key != attack and linked == 0
    assert kernel_under(root, key) == "compiled by genuine"
    # a genuine build re-labelled with an exact version literal still shares the genuine key
    relabelled = candidate(work / "wr", "genuine", init=GENUINE.replace('"1.32.0"', '"1.33.0rc1"'))
    again, linked = stage_key(run(root, work / "r", relabelled, trusted=False, pool=pool))
    assert again == key and linked >= 1
