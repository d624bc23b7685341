"""``scripts/container-smoke`` when it cannot give a verdict: no engine, an image that does not
build, a stack that does not come up in time. Each ends with one line saying why, exit status 3,
and no container, volume or network of its compose project left behind.

The whole smoke (the real images, a verdict from the runner container) is CI's last step
(``.ci/run``) and takes minutes; these take seconds once the base images exist. The failure
cases run the real script with the real engine and compose on a copy of the deployment files in
which the images are small stand-ins (no fe-ci inside: a service that never answers, a build step
that fails), so they cost no real image build; the stand-ins are tagged with names of the test's
own and removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.service import ROOT

SMOKE = ROOT / "scripts" / "container-smoke"
VENV_BIN = ROOT / ".venv" / "bin"
ERROR = "container-smoke: error: "


def _bin_without_engines(tmp_path: Path, *keep: str) -> Path:
    """A PATH directory holding only the tools named, linked from this machine's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", *keep):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _run(env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [str(SMOKE)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def _one_error(stderr: str) -> str:
    """The error, which is all the smoke wrote to stderr: one line."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), stderr
    return lines[0][len(ERROR) :]


def test_without_an_engine_it_says_so_in_one_line(tmp_path: Path) -> None:
    path = _bin_without_engines(tmp_path)
    rc, out, err = _run({"PATH": str(path), "HOME": str(tmp_path)})
    assert rc == 3
    assert _one_error(err).startswith("no container engine: neither docker"), err
    assert "apt-get install podman" in err  # and how to get one
    assert out == ""
    rc, _, err = _run({"PATH": str(path), "HOME": str(tmp_path), "ENGINE": "podman"})
    assert rc == 3 and _one_error(err) == "ENGINE=podman, but podman is not installed"


def test_a_docker_client_without_a_daemon_is_no_engine(tmp_path: Path) -> None:
    """The docker command alone (this machine has the client and no daemon) is not an engine."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client here")
    if subprocess.run([docker, "info"], capture_output=True, timeout=60).returncode == 0:
        pytest.skip("a docker daemon answers here")
    path = _bin_without_engines(tmp_path, "docker")
    rc, _, err = _run({"PATH": str(path), "HOME": str(tmp_path)})
    assert rc == 3 and _one_error(err).startswith("no container engine"), err
    rc, _, err = _run({"PATH": str(path), "HOME": str(tmp_path), "ENGINE": "docker"})
    assert rc == 3 and _one_error(err) == "ENGINE=docker, but no docker daemon answers"


def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None or os.geteuid() != 0:
        pytest.skip("podman as root is needed (scripts/setup installs it as root)")
    if shutil.which("podman-compose") is None and not (VENV_BIN / "podman-compose").exists():
        pytest.skip("podman-compose is not installed (the dev extra installs it)")
    return podman


def _copy(tmp_path: Path, service_dockerfile: str) -> tuple[Path, list[str]]:
    """The smoke and the compose files, with stand-in images under names of this test's own;
    the stand-ins' Dockerfiles: ``service_dockerfile``, and a runner that only sleeps."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    (tree / "docker").mkdir()
    shutil.copy(SMOKE, tree / "scripts" / "container-smoke")
    tag = tmp_path.name.lower()
    images = []
    for name, image in (("docker-compose.yml", "fe-ci-service"),
                        ("docker-compose.cpu.yml", "fe-ci-runner-cpu")):  # fmt: skip
        text = (ROOT / name).read_text()
        assert f"    image: {image}\n" in text, name
        images.append(f"{image}-{tag}")
        (tree / name).write_text(
            text.replace(f"    image: {image}\n", f"    image: {images[-1]}\n")
        )
    (tree / "docker" / "service.Dockerfile").write_text(service_dockerfile)
    (tree / "docker" / "runner.Dockerfile").write_text(
        'FROM scratch AS wheels\nFROM debian:bookworm-slim AS runner\nCMD ["sleep", "600"]\n'
    )
    return tree, images


def _left_behind(podman: str, pid: int) -> list[str]:
    """Containers, volumes and networks of the compose project a smoke of process ``pid`` made."""
    label = f"label=com.docker.compose.project=fe-ci-smoke-{pid}"
    found: list[str] = []
    for kind in (["ps", "-a"], ["volume", "ls"], ["network", "ls"]):
        out = subprocess.run(
            [podman, *kind, "-q", "--filter", label], capture_output=True, text=True, timeout=60
        ).stdout
        found += out.split()
    return found


def _smoke(tree: Path, **env: str) -> tuple[int, str, str, int]:
    """The smoke on ``tree`` with podman; its exit status, output, error output and pid."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FE_CI_", "SMOKE_"))}
    full.update(ENGINE="podman", PATH=f"{VENV_BIN}:{os.environ['PATH']}", **env)
    proc = subprocess.Popen(
        [str(tree / "scripts" / "container-smoke")],
        cwd=tree, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=900)
    return proc.returncode, out, err, proc.pid


def test_an_image_that_does_not_build_stops_it_in_one_line(tmp_path: Path) -> None:
    podman = _podman()
    tree, images = _copy(tmp_path, 'FROM debian:bookworm-slim\nRUN echo "a step" && exit 7\n')
    rc, out, err, pid = _smoke(tree)
    assert rc == 3, out + err
    line = _one_error(err)
    assert line.startswith(f"the image {images[0]} did not build: "), line
    assert "exit status 7" in line, line  # the engine's own words
    log = Path(line.rsplit("(log: ", 1)[1].rstrip(")"))
    assert "a step" in log.read_text()  # the build's log is kept
    shutil.rmtree(log.parent)
    assert f"building {images[0]}" in out  # progress came first
    assert _left_behind(podman, pid) == []


def test_a_stack_that_does_not_come_up_in_time_is_taken_down(tmp_path: Path) -> None:
    """The service stand-in never answers /healthz: the smoke gives up after its time, says so
    in one line, and removes the containers, volumes and network compose made."""
    podman = _podman()
    tree, images = _copy(tmp_path, 'FROM debian:bookworm-slim\nCMD ["sleep", "600"]\n')
    try:
        rc, out, err, pid = _smoke(tree, SMOKE_UP_TIMEOUT_S="10")
        assert rc == 3, out + err
        line = _one_error(err)
        assert line.startswith("the service did not answer /healthz within 10 s"), line
        assert "starting service runner-cpu" in out and "removing the stack's" in out
        logs = Path(line.rsplit("logs: ", 1)[1].rstrip(")"))
        assert {p.name for p in logs.iterdir()} == {"service.log", "runner-cpu.log"}
        shutil.rmtree(logs)
        assert _left_behind(podman, pid) == []
    finally:
        for image in images:
            subprocess.run([podman, "rmi", "-f", image], capture_output=True, timeout=120)
