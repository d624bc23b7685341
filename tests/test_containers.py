"""The deployment files, checked without a Docker engine: the compose file validates (with and
without the Postgres profile), the Dockerfiles pass hadolint, every image installs with the same
script as a checkout, and the images' health check answers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from testkit.service import ROOT, Service

DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def _compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        pytest.skip("docker-compose is not installed (scripts/setup installs Debian's as root)")
    return found


def _config(tmp_path: Path, *args: str, services: bool = False) -> subprocess.CompletedProcess[str]:
    """``docker-compose [args] config`` on the repository's file, with .env.example as the .env."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    shutil.copy(ROOT / "docker-compose.yml", project / "docker-compose.yml")
    shutil.copy(ROOT / ".env.example", project / ".env")
    cmd = [_compose(), *args, "config", *(["--services"] if services else [])]
    return subprocess.run(cmd, cwd=project, capture_output=True, text=True, timeout=60)


def test_compose_file_validates_and_has_what_a_deployment_needs(tmp_path: Path) -> None:
    proc = _config(tmp_path)
    assert proc.returncode == 0, proc.stderr
    rendered = proc.stdout
    assert "nvidia" in rendered and "gpu" in rendered  # the GPU reservation
    assert "SYS_ADMIN" in rendered  # the capability the candidate sandbox needs
    assert "target: builder" in rendered
    services = _config(tmp_path, services=True).stdout.split()
    assert sorted(services) == ["builder", "postgres", "runner", "service"]
    postgres = rendered.split("\n  postgres:\n", 1)[1].split("\n  runner:", 1)[0]
    assert "profiles:\n    - postgres" in postgres  # it starts only with its profile
    with_pg = _config(tmp_path, "--profile", "postgres")
    assert with_pg.returncode == 0, with_pg.stderr
    assert "image: postgres:" in with_pg.stdout


def test_a_broken_compose_file_is_refused(tmp_path: Path) -> None:
    """The check above can fail: an unknown key is refused."""
    project = tmp_path / "project"
    project.mkdir()
    text = (ROOT / "docker-compose.yml").read_text().replace("restart:", "restrat:", 1)
    (project / "docker-compose.yml").write_text(text)
    shutil.copy(ROOT / ".env.example", project / ".env")
    proc = subprocess.run(
        [_compose(), "config", "-q"], cwd=project, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "restrat" in proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed (the dev extra installs it)")
    proc = subprocess.run(
        [str(hadolint), str(dockerfile)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.skip("hadolint is not installed (the dev extra installs it)")
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python\nRUN apt-get install curl\n")
    proc = subprocess.run([str(hadolint), str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "DL3006" in proc.stdout  # untagged image


def _runs(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [line.strip()[4:] for line in joined.splitlines() if line.strip().startswith("RUN ")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_image_installs_fe_ci_with_the_shared_script(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    stages = [s for s in re.split(r"^FROM ", text, flags=re.M)[1:]]
    assert stages
    for stage in stages:
        runs = _runs(stage)
        assert any(r.startswith("./scripts/install ") for r in runs), stage.splitlines()[0]
        assert not any("pip install" in r for r in runs), "install through scripts/install only"


def test_setup_uses_the_same_install_script() -> None:
    setup = (ROOT / "scripts" / "setup").read_text()
    assert re.search(r"^\S*\s*\./scripts/install \.venv ", setup, flags=re.M)
    assert "pip install" not in setup


def test_health_endpoint_answers_with_the_database(service: Service) -> None:
    resp = httpx.get(f"{service.url}/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok", "database": "sqlite"}
    dockerfile = (ROOT / "docker" / "service.Dockerfile").read_text()
    assert "HEALTHCHECK" in dockerfile and "/healthz" in dockerfile


def test_env_example_names_only_real_settings() -> None:
    """Every ``FE_CI_*`` name in .env.example is a setting of the service or of a runner."""
    from runner.config import RunnerSettings
    from service.config import Settings

    known = {f"FE_CI_{name.upper()}" for name in Settings.model_fields}
    known |= {f"FE_CI_{name.upper()}" for name in RunnerSettings.model_fields}
    text = (ROOT / ".env.example").read_text()
    named = set(re.findall(r"^#?\s*(FE_CI_[A-Z_]+)=", text, flags=re.M))
    assert {"FE_CI_SUBMIT_TOKEN", "FE_CI_RUNNER_TOKEN", "FE_CI_WEBHOOK_SECRET"} <= named
    assert named <= known, named - known
    compose = (ROOT / "docker-compose.yml").read_text()
    assert set(re.findall(r"\b(FE_CI_[A-Z_]+):", compose)) <= known


def test_build_context_holds_what_the_images_copy_and_no_secrets() -> None:
    """.dockerignore is an allow-list: each COPY source is on it, .env and .venv are not."""
    allowed = {
        line[1:]
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert ".env" not in allowed and ".venv" not in allowed
    for dockerfile in DOCKERFILES:
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY "):
                sources = line.split()[1:-1]
                assert set(sources) <= allowed, (dockerfile.name, line)
