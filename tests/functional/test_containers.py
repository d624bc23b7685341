"""The deployment files, checked without a Docker engine: the compose files validate (with and
without the Postgres and proxy profiles, with the CPU runner's file), the Dockerfiles pass
hadolint, every fe-ci image installs with the same script as a checkout, the images' health check
answers, and the proxy's nginx configuration serves a real service over TLS (Debian's nginx, where
installed). scripts/container-smoke builds and runs them (CI's last step;
tests/functional/test_container_smoke.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit import loopback
from testkit.service import ROOT, WEBHOOK, Service, free_port
from testkit.waiting import eventually
from tests.helpers import push

DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))  # the fe-ci images
ALL_DOCKERFILES = [*DOCKERFILES, ROOT / "docker" / "postgres-debian" / "Dockerfile"]


def _compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        pytest.skip("docker-compose is not installed (scripts/setup installs Debian's as root)")
    return found


def _config(
    tmp_path: Path, *args: str, services: bool = False, env: str = ""
) -> subprocess.CompletedProcess[str]:
    """``docker-compose [args] config`` on the repository's files, with .env.example and ``env``
    as the .env."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    for name in ("docker-compose.yml", "docker-compose.cpu.yml"):
        shutil.copy(ROOT / name, project / name)
    (project / ".env").write_text((ROOT / ".env.example").read_text() + env)
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
    assert sorted(services) == ["builder", "postgres", "proxy", "runner", "service"]
    postgres = rendered.split("\n  postgres:\n", 1)[1].split("\n  runner:", 1)[0]
    assert "profiles:\n    - postgres" in postgres  # it starts only with its profile
    with_pg = _config(tmp_path, "--profile", "postgres")
    assert with_pg.returncode == 0, with_pg.stderr
    assert "image: postgres:" in with_pg.stdout
    proxy = _service(rendered, "proxy")
    assert "profiles:\n    - proxy" in proxy  # nginx starts only with its profile
    assert "/etc/nginx/nginx.conf" in proxy and "/etc/nginx/certs" in proxy
    assert "published: 443" in proxy
    with_proxy = _config(tmp_path, "--profile", "proxy")
    assert with_proxy.returncode == 0, with_proxy.stderr


def _service(rendered: str, name: str) -> str:
    """One service's block of ``docker-compose config`` output."""
    block = rendered.split(f"\n  {name}:\n", 1)[1]
    return re.split(r"\n  [a-z-]+:\n|\n[a-z]", block, maxsplit=1)[0]


def test_the_cpu_runner_file_adds_a_runner_without_a_gpu(tmp_path: Path) -> None:
    """docker-compose.cpu.yml beside the main file: a runner with the sandbox's settings, built
    on Debian with a CPU torch, and no GPU reservation; the GPU runner is as it was."""
    both = ("-f", "docker-compose.yml", "-f", "docker-compose.cpu.yml")
    proc = _config(tmp_path, *both)
    assert proc.returncode == 0, proc.stderr
    cpu = _service(proc.stdout, "runner-cpu")
    assert "nvidia" not in cpu and "deploy" not in cpu
    assert "SYS_ADMIN" in cpu and "seccomp=unconfined" in cpu
    assert "RUNNER_BASE_IMAGE: debian:bookworm-slim" in cpu
    assert re.search(r"TORCH_SPEC: torch==[0-9.]+\+cpu", cpu), cpu
    assert "target: runner" in cpu and "image: fe-ci-runner-cpu" in cpu
    assert "FE_CI_URL: http://service:8080" in cpu
    assert "nvidia" in _service(proc.stdout, "runner")
    services = _config(tmp_path, *both, services=True).stdout.split()
    assert sorted(services) == ["builder", "postgres", "proxy", "runner", "runner-cpu", "service"]


def test_the_postgres_image_and_the_published_port_can_be_chosen(tmp_path: Path) -> None:
    """``POSTGRES_IMAGE`` (an image with the official one's settings, e.g. the Debian one that
    docker/postgres-debian builds) and ``FE_CI_PORT`` (where the service is published)."""
    proc = _config(tmp_path, "--profile", "postgres")
    assert "image: postgres:16" in _service(proc.stdout, "postgres")
    assert "published: 8080\n      target: 8080" in _service(proc.stdout, "service")
    chosen = "POSTGRES_IMAGE=fe-ci-postgres-debian\nFE_CI_PORT=18080\n"
    proc = _config(tmp_path, "--profile", "postgres", env=chosen)
    assert proc.returncode == 0, proc.stderr
    assert "image: fe-ci-postgres-debian" in _service(proc.stdout, "postgres")
    assert "published: 18080\n      target: 8080" in _service(proc.stdout, "service")


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


@pytest.mark.parametrize("dockerfile", ALL_DOCKERFILES, ids=lambda p: p.parent.name + "/" + p.name)
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


def _stages(dockerfile: Path) -> list[str]:
    """The build stages (``FROM`` to the next), less the empty ``scratch`` ones."""
    stages = re.split(r"^FROM ", dockerfile.read_text(), flags=re.M)[1:]
    return [stage for stage in stages if not stage.startswith("scratch ")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_image_installs_fe_ci_with_the_shared_script(dockerfile: Path) -> None:
    """Each stage installs fe-ci with scripts/install, or takes the environment one made."""
    stages = _stages(dockerfile)
    assert stages
    for stage in stages:
        runs = _runs(stage)
        installs = any(re.search(r"(^|\s)\./scripts/install ", r) for r in runs)
        takes = re.search(r"^COPY --from=\w+ /opt/fe-ci /opt/fe-ci$", stage, flags=re.M)
        assert installs or takes, stage.splitlines()[0]
        assert not any("pip install" in r for r in runs), "install through scripts/install only"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_fe_ci_source_comes_after_everything_heavy(dockerfile: Path) -> None:
    """torch and fe-ci's dependencies install from pyproject.toml before the source is copied,
    and nothing that downloads comes after it: a change to the source rebuilds only the layers
    that install fe-ci itself."""
    checked = 0
    for stage in _stages(dockerfile):
        steps = [line for line in stage.splitlines() if line.startswith(("COPY ", "RUN "))]
        source = [i for i, s in enumerate(steps) if re.match(r"COPY (core|runner|service) ", s)]
        if not source:
            continue
        before, after = " ".join(steps[: source[0]]), steps[source[0] :]
        assert "./scripts/install " in before, stage.splitlines()[0]
        runs = [s for s in after if s.startswith("RUN ")]
        assert runs and all(r.startswith("RUN ./scripts/install ") for r in runs), runs
        checked += 1
    assert checked


def test_setup_uses_the_same_install_script() -> None:
    setup = (ROOT / "scripts" / "setup").read_text()
    assert re.search(r"^\S*\s*\./scripts/install \.venv ", setup, flags=re.M)
    assert "pip install" not in setup


def test_health_endpoint_answers_with_the_database(service: Service) -> None:
    resp = loopback.get(f"{service.url}/healthz")
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
    for name in ("docker-compose.yml", "docker-compose.cpu.yml"):
        compose = (ROOT / name).read_text()
        # FE_CI_PORT is compose's own: the host port it publishes the service on (as quickstart's)
        assert set(re.findall(r"\b(FE_CI_[A-Z_]+):", compose)) <= known | {"FE_CI_PORT"}


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
            if line.startswith("COPY ") and not line.startswith("COPY --from="):
                sources = line.split()[1:-1]
                assert set(sources) <= allowed, (dockerfile.name, line)


# ---------------------------------------------------------------- the proxy profile's nginx


def _nginx() -> str:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if found is None:
        pytest.skip("nginx is not installed (scripts/setup installs Debian's as root)")
    return found


@pytest.fixture
def proxy_dir() -> Iterator[Path]:
    """Outside pytest's 0700 temp dirs: nginx's workers run as nobody when the test is root."""
    path = Path(tempfile.mkdtemp(prefix="fe-ci-proxy-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _self_signed(certs: Path) -> Path:
    certs.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(certs / "privkey.pem"), "-out", str(certs / "fullchain.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return certs / "fullchain.pem"


def _local_conf(run: Path, upstream: int, https: int, http: int) -> Path:
    """docker/proxy/nginx.conf with the addresses and paths of this machine in place of the
    container's; every replaced line must be in the file, so the test follows it."""
    text = (ROOT / "docker" / "proxy" / "nginx.conf").read_text()
    for old, new in {
        "server service:8080;": f"server 127.0.0.1:{upstream};",
        "listen 443 ssl;": f"listen 127.0.0.1:{https} ssl;",
        "listen 80;": f"listen 127.0.0.1:{http};",
        "/etc/nginx/certs/": f"{run}/certs/",
        "pid /tmp/nginx.pid;": f"pid {run}/nginx.pid;",
        "access_log /dev/stdout;": f"access_log {run}/access.log;",
        "http {\n": f"http {{\n    client_body_temp_path {run}/body;\n"
        f"    proxy_temp_path {run}/proxy;\n",
    }.items():
        assert old in text, old
        text = text.replace(old, new)
    conf = run / "nginx.conf"
    conf.write_text(text)
    return conf


def test_the_proxy_serves_the_service_over_tls(service: Service, proxy_dir: Path) -> None:
    """The proxy profile's configuration, run by Debian's nginx in front of a real service:
    TLS with the mounted certificate's file names, plain HTTP redirected, pages and a signed
    webhook (its body read whole by nginx first) proxied."""
    cert = _self_signed(proxy_dir / "certs")
    https, http = free_port(), free_port()
    conf = _local_conf(proxy_dir, service.port, https, http)
    nginx = _nginx()
    check = subprocess.run(
        [nginx, "-t", "-e", "stderr", "-p", str(proxy_dir), "-c", str(conf)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(
        [nginx, "-e", "stderr", "-p", str(proxy_dir), "-c", str(conf), "-g", "daemon off;"],
        stderr=subprocess.PIPE,
    )
    tls = ssl.create_default_context(cafile=str(cert))
    base = f"https://127.0.0.1:{https}"
    try:

        def healthz() -> httpx.Response:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            return loopback.get(f"{base}/healthz", verify=tls, timeout=5)

        health = eventually(healthz, timeout=10, ignoring=(httpx.TransportError,), message="nginx")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        plain = loopback.get(f"http://127.0.0.1:{http}/builds/1", timeout=5)
        assert plain.status_code == 301
        assert plain.headers["location"] == "https://127.0.0.1/builds/1"
        page = loopback.get(f"{base}/", verify=tls, timeout=30)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        body = json.dumps(push()).encode()
        signature = hmac.new(WEBHOOK.encode(), body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "through-the-proxy",
            "X-Hub-Signature-256": f"sha256={signature}",
        }
        resp = loopback.post(
            f"{base}/api/webhooks/github", content=body, headers=headers, verify=tls, timeout=30
        )
        assert resp.status_code == 200 and resp.json()["outcome"].startswith("queued"), resp.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
