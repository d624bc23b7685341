"""A throwaway PostgreSQL server: its own cluster in a temp dir, on 127.0.0.1, for the tests
(``tests/postgres.py``'s fixtures) and the benchmarks.

``initdb`` and the server refuse to run as root, so as root they run as the ``postgres`` user
(Debian's package creates it).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from testkit.service import free_port

SEARCH = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin", "/usr/pgsql-*/bin")


def find_bindir() -> Path | None:
    """The newest directory holding ``initdb`` and ``pg_ctl``, else ``None``."""
    if os.environ.get("FE_CI_TEST_PG_BINDIR"):
        return Path(os.environ["FE_CI_TEST_PG_BINDIR"])
    found: list[Path] = []
    for pattern in SEARCH:
        found += [p for p in Path("/").glob(pattern.lstrip("/")) if (p / "initdb").is_file()]
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        found.append(Path(pg_ctl).parent)

    def version(p: Path) -> tuple[int, ...]:
        digits = [part for part in p.parts if part.isdigit()]
        return tuple(int(d) for d in digits) or (0,)

    usable = [p for p in found if (p / "pg_ctl").is_file()]
    return max(usable, key=version) if usable else None


@dataclass
class PostgresServer:
    bindir: Path
    root: Path
    port: int
    user: str | None  # who runs the server (None: this process's own user)
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.user is not None:
            kwargs = {
                "user": self.user,
                "group": pwd.getpwnam(self.user).pw_gid,
                "extra_groups": [],
            }
        return subprocess.run(  # type: ignore[call-overload]
            [str(self.bindir / args[0]), *args[1:]],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "TZ": "UTC"},
            **kwargs,
        )

    def start(self) -> PostgresServer:
        init = self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr or init.stdout}")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port}"
            f" -c unix_socket_directories={self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=300 -c deadlock_timeout=200ms"
        )
        started = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                            "-o", options, "start")  # fmt: skip
        if started.returncode != 0:
            tail = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"postgres did not start: {started.stderr}{tail}")
        return self

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres", autocommit=True
        ) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


class NoServerUser(Exception):
    """Running as root with no user to run the server as."""


def server_user() -> str | None:
    """Who runs the server: this process's own user, or as root ``postgres`` (else ``nobody``)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise NoServerUser("running as root with neither a postgres nor a nobody user to run it as")


@contextmanager
def running(bindir: Path) -> Iterator[PostgresServer]:
    """A cluster started in a temp dir of its own (not under pytest's 0700 tmp tree), stopped and
    removed after."""
    user = server_user()
    root = Path(tempfile.mkdtemp(prefix="fe-ci-pg-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PostgresServer(bindir=bindir, root=root, port=free_port(), user=user)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
