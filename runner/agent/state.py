"""What a runner keeps on disk between its processes, under ``<cache dir>/state/runner-<name>/``.

- ``credentials.json``: the token the service issued at registration, with the runner's id and
  the service's URL. A runner restarted on the same host (after a crash, SIGKILL, a reboot)
  resumes its identity with it instead of registering anew, as the GitHub Actions runner keeps
  its ``.credentials`` beside itself.
- ``results/job-<id>-<attempt>.json``: a finished job's result (the stages the service has not
  acknowledged, the environment, the error), written before it is sent and removed once the
  service has it or has refused it for good. A result survives a service outage and a restart
  of the runner: the next start sends it.

Each file is written whole (a temporary file in the same directory, fsync, rename, fsync of the
directory), so a crash leaves the old file or the new one, never half of one; and only the
runner's user may read it (0600, in a 0700 directory): the credential and the lease tokens are
secrets.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from core.wire import Environment, JobLease, Stage, StageResult

log = logging.getLogger("fe_ci.agent")


class Identity(BaseModel):
    url: str
    runner_id: int
    name: str
    token: str


class KeptResult(BaseModel):
    lease: JobLease
    stages: list[StageResult]  # those not yet acknowledged, in the order they ran
    environment: Environment
    error: str | None = None
    logs: dict[Stage, str] = Field(default_factory=dict)  # each stage's log, sent with it


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, readable by this user only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:  # mkstemp creates it 0600
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class State:
    def __init__(self, cache_dir: Path, name: str) -> None:
        # the prefix keeps any name (``..`` passes the name pattern) a plain directory name
        self.dir = Path(cache_dir) / "state" / f"runner-{name}"
        self.credentials = self.dir / "credentials.json"
        self.results = self.dir / "results"

    # ---------------------------------------------------------------- identity

    def identity(self, url: str) -> Identity | None:
        """The identity kept for the service at ``url``; None if there is none (or unreadable)."""
        try:
            kept = Identity.model_validate_json(self.credentials.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.warning("event=credentials_unreadable path=%s error=%s", self.credentials, exc)
            return None
        return kept if kept.url.rstrip("/") == url.rstrip("/") else None

    def save_identity(self, identity: Identity) -> None:
        write_private(self.credentials, identity.model_dump_json())

    def forget_identity(self) -> None:
        self.credentials.unlink(missing_ok=True)

    # ---------------------------------------------------------------- kept results

    def keep(self, result: KeptResult) -> Path:
        path = self.results / f"job-{result.lease.job_id}-{result.lease.attempt}.json"
        write_private(path, result.model_dump_json())
        return path

    def kept(self) -> list[tuple[Path, KeptResult]]:
        """The results kept and not yet sent, oldest job first; an unreadable one is removed."""
        out: list[tuple[Path, KeptResult]] = []
        for path in sorted(self.results.glob("job-*.json")):
            try:
                out.append((path, KeptResult.model_validate_json(path.read_bytes())))
            except (OSError, ValidationError) as exc:
                log.warning("event=kept_result_unreadable path=%s error=%s", path, exc)
                path.unlink(missing_ok=True)
        out.sort(key=lambda item: (item[1].lease.job_id, item[1].lease.attempt))
        return out

    def holding(self) -> list[int]:
        """The jobs whose results are kept here: their leases are still this runner's."""
        return sorted({result.lease.job_id for _, result in self.kept()})
