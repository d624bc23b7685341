"""Warm parents for the CPU stages (runner/isolation/zygotes.py, runner/inside/zygote.py).

A real dependency layer of the registry's 1.32.0 wheel, a real zygote process in the sandbox a
stage gets (bubblewrap and a uid of its own where the runner is root, as in CI), real forks, each
stage in namespaces of its own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.envs import layers
from runner.isolation import held_folders, jail, zygotes
from runner.pipeline import pipeline, pipeline_options
from testkit import frontend_repo as fr
from testkit import wheels
from testkit.registry import registry_wheel
from tests.helpers import alive, layer_1_32, processes_with, wait_gone

pytestmark = pytest.mark.slow  # builds a real dependency layer


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> layers.Layer:
    """The 1.32.0 layer, from the session's shared layers where there are (built once)."""
    built: layers.Layer = layer_1_32(tmp_path_factory.mktemp)
    return built


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zygotes.Zygotes]:
    """One pool for the module, as a runner keeps one: its zygote (torch and the DSL imported, a
    few seconds of CPU to start) serves every test that forks stages from it. Each test counts
    the forks it made, and none kills it: each passes alone and in any order."""
    zs = zygotes.Zygotes(tmp_path_factory.mktemp("zygotes"))
    yield zs
    zs.close()


def _module_dir(tmp_path: Path, name: str, code: str) -> Path:
    """A directory holding one module (the stage's "candidate", linked into its room)."""
    where = tmp_path / f"mods-{name}"
    where.mkdir(exist_ok=True)
    (where / f"{name}.py").write_text(code)
    return where


def _run(z: zygotes.Zygote, tmp_path: Path, name: str, code: str, **kw: object):  # type: ignore[no-untyped-def]
    params = tmp_path / f"{name}.params.json"
    params.write_text('{"a": 1}')
    return z.run(
        module=name,
        params=params,
        env={"PATH": os.environ.get("PATH", ""), "MARK": "from-the-request"},
        site=_module_dir(tmp_path, name, code),
        log_path=tmp_path / f"{name}.log",
        out_path=tmp_path / f"{name}.doc.json",
        **{"timeout_s": 60.0, **kw},  # type: ignore[arg-type]
    )


def test_a_forked_stage_is_sandboxed_and_sees_its_request(
    pool: zygotes.Zygotes, layer: layers.Layer, tmp_path: Path
) -> None:
    z = pool.get(layer)
    assert z is not None and z.preloaded["torch"] == "ok", z and z.preloaded
    forks = z.forks
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (
        "import json, os, sys, socket\n"
        "print('torch preloaded', 'torch' in sys.modules, 'params', open(sys.argv[2]).read())\n"
        "print('mark', os.environ.get('MARK'), 'home is cwd', os.environ['HOME'] == os.getcwd())\n"
        "print('uid', os.getuid(), 'pid', os.getpid())\n"
        "import tempfile\n"  # the zygote asked for its own temp dir while it preloaded
        "print('tmp is its own', tempfile.gettempdir() == os.environ['TMPDIR'])\n"
        "for d in ('/tmp', '/dev/shm'): open(d + '/left-behind', 'w').write('x')\n"
        "print('socket hidden', os.listdir(os.path.dirname(sys.argv[2]) + '/../../sock'))\n"
        "s = socket.socket(); s.settimeout(3)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
        "json.dump({'seen': True}, open(sys.argv[4], 'w'))\n"
    )
    out = _run(z, tmp_path, "peek", code)
    server.close()
    assert out is not None and out.ok, out
    assert """torch preloaded True params {"a": 1}""" in out.log_tail
    assert "mark from-the-request home is cwd True" in out.log_tail
    assert "tmp is its own True" in out.log_tail
    assert " pid 2\n" in out.log_tail  # its own pid namespace, under an init of its own
    assert "socket hidden []" in out.log_tail  # no stage reaches back into the zygote
    assert "refused" in out.log_tail and "connected" not in out.log_tail
    if jail.mechanism().uid_drop:  # the runner is root (CI is): the zygote's own uid
        assert z.uid is not None and f"uid {z.uid} " in out.log_tail
    assert (tmp_path / "peek.doc.json").read_text() == '{"seen": true}'
    assert list((z.root / "rooms").iterdir()) == []  # the room is gone with the stage
    after = _run(
        z,
        tmp_path,
        "after",
        "import os\nprint(os.listdir('/dev/shm'), 'left-behind' in os.listdir('/tmp'))\n",
    )
    assert after is not None and after.ok and "[] False" in after.log_tail, (
        after
    )  # fresh /tmp, /dev/shm
    assert z.forks == forks + 2


def test_a_setsid_daemon_of_a_stage_dies_with_the_stage(
    pool: zygotes.Zygotes, layer: layers.Layer, tmp_path: Path
) -> None:
    """A stage's child that leaves its session is still in the stage's pid namespace: gone when
    the stage ends, though the zygote lives on."""
    z = pool.get(layer)
    assert z is not None
    token = "31337.0417"  # a sleep nobody else runs
    code = f"import subprocess\nsubprocess.Popen(['setsid', 'sleep', '{token}'])\nprint('forked')\n"
    out = _run(z, tmp_path, "daemon", code)
    assert out is not None and out.ok and "forked" in out.log_tail, out
    wait_gone(lambda: processes_with(token), "the stage's setsid child")
    assert z.alive()


def test_hang_crash_and_exit_status_and_the_zygote_serves_on(
    pool: zygotes.Zygotes, layer: layers.Layer, tmp_path: Path
) -> None:
    z = pool.get(layer)
    assert z is not None
    token = "31337.0418"  # a sleep nobody else runs
    hang = _run(
        z,
        tmp_path,
        "hang",
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '{token}'])\n"
        "print('grandchild', p.pid, flush=True)\ntime.sleep(600)\n",
        timeout_s=2.0,
    )
    assert hang is not None and hang.status == "timeout", hang
    assert "grandchild" in hang.log_tail
    wait_gone(lambda: processes_with(token), "the timed-out stage's child")
    crash = _run(
        z,
        tmp_path,
        "crash",
        "import ctypes\nprint('about to crash', flush=True)\nctypes.string_at(0)\n",
    )
    assert crash is not None and crash.status == "crashed" and crash.signal == signal.SIGSEGV
    assert "about to crash" in crash.log_tail
    failed = _run(z, tmp_path, "three", "raise SystemExit(3)\n")
    assert failed is not None and (failed.status, failed.returncode) == ("failed", 3)
    assert z.alive() and pool.get(layer) is z


def test_runners_sharing_a_cache_directory_keep_their_zygotes_apart(
    layer: layers.Layer, tmp_path: Path
) -> None:
    """A CPU runner beside the GPU runner, both with one ``FE_CI_CACHE_DIR``: the second starts
    the zygote of the same layer (the same key) while the first's serves, and neither removes
    the other's. Before, the second removed the first's folder and the first's next stage
    failed (``FileNotFoundError`` making its room): the probe of a GPU job errored. Pools of
    their own whose zygotes preload nothing: what they imported has no part in where they live."""
    shared = tmp_path / "cache" / "zygotes"
    pools = [zygotes.Zygotes(shared, preload=()) for _ in range(2)]
    try:
        first = pools[0].get(layer)
        second = pools[1].get(layer)
        assert first is not None and second is not None and second.key == first.key
        for z in (first, second):
            out = _run(z, tmp_path, f"shared{z.proc.pid}", "print('served')\n")
            assert out is not None and out.ok and "served" in out.log_tail, out
        pools[1].close()  # its runner stopped: the next to start removes what it left
        later = zygotes.Zygotes(shared, preload=())
        later.close()
        assert first.alive() and first.root.is_dir() and not second.root.exists()
        out = _run(first, tmp_path, "still", "print('served')\n")
        assert out is not None and out.ok, out
    finally:
        for pool in pools:
            pool.close()


def test_the_zygote_folders_of_runners_gone_are_removed_and_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    """A runner killed leaves its folder (its lock free once it is gone); the layout before
    kept a zygote's key directly under the root. The next runner removes both, never a folder
    whose lock a live runner holds."""
    import fcntl

    root = tmp_path / "zygotes"
    gone, live, legacy = root / "41-00aa11bb", root / "42-22cc33dd", root / "0123456789abcdef"
    for folder in (gone, live, legacy):
        (folder / "rooms").mkdir(parents=True)
    (gone / held_folders.LOCK).touch()
    with (live / held_folders.LOCK).open("wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pool = zygotes.Zygotes(root, preload=())
        assert sorted(p.name for p in root.iterdir()) == sorted([live.name, pool.root.name])
        assert (live / "rooms").is_dir()
        pool.close()  # its runner stopped: its folder stays until the next pool starts
        zygotes.Zygotes(root, preload=()).close()
        names = {p.name for p in root.iterdir()}
        assert live.name in names and pool.root.name not in names and len(names) == 2


def test_a_dead_zygote_is_never_the_stages_result_and_is_replaced(
    layer: layers.Layer, tmp_path: Path
) -> None:
    """A pool of its own, whose zygotes preload nothing: how one dies and is replaced does not
    depend on what it imported, and the module's warm zygote serves on."""
    pool = zygotes.Zygotes(tmp_path / "zygotes", preload=())
    try:
        z = pool.get(layer)
        assert z is not None
        os.killpg(z.proc.pid, signal.SIGKILL)
        z.proc.wait()
        assert _run(z, tmp_path, "late", "print('never')\n") is None  # the caller spawns instead
        again = pool.get(layer)
        assert again is not None and again is not z and again.alive()
    finally:
        pool.close()


def test_warm_builds_probe_and_refuse_through_the_zygote_with_the_same_answers(
    pool: zygotes.Zygotes, layer: layers.Layer, tmp_path: Path
) -> None:
    wheel = registry_wheel("1.32.0")
    stages = [Stage.install, Stage.probe, Stage.refusal]

    def build(name: str, zs: zygotes.Zygotes | None) -> pipeline.Pipeline:
        opts = pipeline_options.Options(
            stages=stages,
            work_dir=tmp_path / name,
            layers_dir=layer.root.parent,
            zygotes=zs,
            report_unselected=False,
        )
        pipe = pipeline.Pipeline(opts)
        assert pipe.install(wheel).status == Status.pass_
        return pipe

    served = pool.get(layer)
    assert served is not None
    forks = served.forks
    plain = build("plain", None)
    warm = build("warm", pool)
    answers = []
    for pipe in (plain, warm):
        probe = pipe.probe()
        refusal = pipe.run_inside(Stage.refusal, {})
        assert probe.status == Status.pass_ and refusal.status == Status.pass_, (probe, refusal)
        answers.append((probe.capabilities, [r.model_dump() for r in refusal.refusal]))
    assert answers[0] == answers[1]
    (z,) = pool._live.values()
    assert z is served and z.forks == forks + 2  # the warm build's probe and refusal only


def test_a_build_without_dependencies_forks_the_zygote_of_no_layer(tmp_path: Path) -> None:
    """A build that declares no dependencies (the frontend's older releases) is installed on the
    warm path with no layer to attach; its probe and refusal fork the one zygote of no layer (the
    host's torch alone) and answer as a fresh interpreter does. A pool of its own: the module's
    serves the layer's zygote alone."""
    init = fr.INIT.format(n=1, version="1.4.0", knob=", deterministic=None")
    wheel = wheels.make_wheel(tmp_path / "dist", "1.4.0", init)
    pool = zygotes.Zygotes(tmp_path / "zygotes")
    answers = []
    try:
        for name, zs in (("plain", None), ("warm", pool)):
            opts = pipeline_options.Options(
                stages=[Stage.install, Stage.probe, Stage.refusal],
                work_dir=tmp_path / name,
                layers_dir=tmp_path / "layers",
                zygotes=zs,
                report_unselected=False,
            )
            pipe = pipeline.Pipeline(opts)
            installed = pipe.install(wheel)
            assert "no dependencies declared" in installed.reason, installed
            probe, refusal = pipe.probe(), pipe.run_inside(Stage.refusal, {})
            assert probe.status == Status.pass_ and refusal.status == Status.pass_, (probe, refusal)
            answers.append((probe.capabilities, [r.model_dump() for r in refusal.refusal]))
        (z,) = pool._live.values()
        assert z.key == pool.key(None) and z.forks == 2
    finally:
        pool.close()
    assert answers[0] == answers[1]
    dsrelu = answers[1][0]["grouped_gemm_dsrelu"]
    assert dsrelu.present and dsrelu.default == "None", dsrelu


def test_a_zygote_dies_with_a_runner_killed_by_sigkill(layer: layers.Layer, tmp_path: Path) -> None:
    """The runner's zygote preloads nothing: what it imported has no part in how it dies."""
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from runner.envs import envs, warm_install; from runner.isolation import zygotes\n"
        f"meta = envs.read_wheel_metadata(Path({str(registry_wheel('1.32.0'))!r}))\n"
        f"layer = warm_install.ensure_layer(meta, layers_dir=Path({str(layer.root.parent)!r}), "
        "timeout_s=900)\n"
        f"z = zygotes.Zygotes(Path({str(tmp_path / 'zygotes')!r}), preload=()).get(layer)\n"
        "print(z.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    assert runner.stdout is not None
    zygote_pid = int(runner.stdout.readline())
    assert alive(zygote_pid)
    runner.kill()
    runner.wait()
    wait_gone(lambda: [zygote_pid] if alive(zygote_pid) else [], "the zygote", timeout=10)
    wait_gone(lambda: processes_with(str(tmp_path / "zygotes")), "the zygote's sandbox")
