"""The installer without a way out: what a candidate's metadata can make the install stage do.

A real HTTP server on 127.0.0.1 serves an sdist whose in-tree build backend, the moment an
installer imports it, asks the server for ``/setup-ran``: that request is the marker of
install-time code run with a way out. The candidates are constructed frontend wheels
(testkit/wheels.py) installed by the runner's real pipeline, in its real sandbox.
"""

from __future__ import annotations

import http.server
import io
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.wire import Stage, Status
from runner.envs import envs
from runner.isolation import jobbox
from runner.pipeline import pipeline, pipeline_options
from testkit.wheels import make_wheel

BACKEND = """\
import urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:{port}/setup-ran", timeout=5).read()
except OSError:
    pass
"""


@dataclass
class Loopback:
    """An HTTP server on 127.0.0.1 that serves ``files`` and records every path asked for."""

    port: int
    files: dict[str, bytes] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


@pytest.fixture
def server() -> Iterator[Loopback]:
    state = Loopback(port=0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.asked.append(self.path)
            body = state.files.get(self.path.lstrip("/"), b"ok")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def sdist(name: str, port: int) -> bytes:
    """A real sdist of ``name`` 1.0 whose build backend lives in the archive: an installer that
    builds it imports ``backend.py`` (nothing to download first), which asks for the marker."""
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        "pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        ),
        "backend.py": BACKEND.format(port=port),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-1.0/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def install(tmp: Path, wheel: Path, **kw: object) -> tuple[Status, str]:
    opts = pipeline_options.Options(
        stages=[Stage.probe],
        work_dir=tmp / "job",
        layers_dir=None,
        report_unselected=False,
        **kw,  # type: ignore[arg-type]
    )
    result = pipeline.Pipeline(opts).run(wheel)
    (stage,) = [s for s in result.stages if s.name == Stage.install]
    return stage.status, stage.reason


@pytest.mark.parametrize(
    "requirement",
    [
        "x @ http://127.0.0.1:{port}/x-1.0.tar.gz",
        "x @ git+http://127.0.0.1:{port}/x.git ; python_version < '2'",  # whatever its markers
    ],
)
def test_a_direct_url_requirement_is_refused_before_any_installer_runs(
    tmp_path: Path, server: Loopback, requirement: str
) -> None:
    server.files["x-1.0.tar.gz"] = sdist("x", server.port)
    req = requirement.format(port=server.port)
    wheel = make_wheel(tmp_path / "w", "1.32.0", "", requires=(req,))
    status, reason = install(tmp_path, wheel)
    assert server.asked == []  # not fetched, not built: nothing asked for the marker
    assert status == Status.error, reason
    assert reason.startswith("refused before installing: Requires-Dist ")
    assert req in reason and "direct URL or VCS requirement" in reason
    assert not (tmp_path / "job" / "env").exists()  # no environment half-made


def test_a_dependency_is_installed_as_a_wheel_or_not_at_all(
    tmp_path: Path, server: Loopback
) -> None:
    """The wheelhouse holds the dependency only as an sdist: the installer refuses to build it
    (and, from a wheelhouse alone, would have had no network to reach the marker with)."""
    house = tmp_path / "wheelhouse"
    house.mkdir()
    (house / "y-1.0.tar.gz").write_bytes(sdist("y", server.port))
    wheel = make_wheel(tmp_path / "w", "1.32.0", "", requires=("y",))
    status, reason = install(tmp_path, wheel, wheelhouse=house)
    assert server.asked == []
    assert status == Status.fail, reason
    assert "y" in reason and ("No matching distribution" in reason or "not found" in reason), reason


def test_an_install_from_a_wheelhouse_alone_has_no_network(
    tmp_path: Path, server: Loopback
) -> None:
    """The install sandbox as ``run_installer`` builds it: from a wheelhouse alone, no network
    (the loopback server unreachable); from an index, the network the index needs."""
    assert envs.needs_network("http://127.0.0.1:1/simple", tmp_path) is True
    assert envs.needs_network(None, None) is True  # the default index
    probe = (
        "import socket, sys\n"
        f"try: socket.create_connection(('127.0.0.1', {server.port}), timeout=3)\n"
        "except OSError: sys.exit(3)\n"
    )
    env = envs.create_env(tmp_path / "env")
    for network, rc in ((envs.needs_network(None, tmp_path), 3), (True, 0)):
        with jobbox.temporary(tmp_path / f"box-{network}") as job:
            outcome = envs.run_installer(
                job,
                env,
                [sys.executable, "-c", probe],
                tmp_path / "probe.log",
                30,
                network=network,
            )
        assert outcome.returncode == rc, (network, outcome.describe(), outcome.log_tail)


def test_the_installer_commands_take_wheels_only(tmp_path: Path) -> None:
    env = envs.CandidateEnv(tmp_path / "env")
    for installer in ("pip", "uv") if envs.find_uv() else ("pip",):
        cmd = envs.install_command(installer, env, ["x.whl"], wheelhouse=tmp_path)
        assert cmd[cmd.index("--only-binary") + 1] == ":all:", cmd
    cmd = envs.pip_install_command(env, "x.whl", constraints=None, index_url=None, wheelhouse=None)
    assert cmd[cmd.index("--only-binary") + 1] == ":all:", cmd
