"""The service's settings, read once from the environment (prefix ``FE_CI_``)."""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import sys
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core import bisection, cells, gate, history
from core.redaction import TOKENS_FILE, read_tokens
from core.subjects import FAMILIES

TOKEN_NAMES = ("submit_token", "runner_token", "webhook_secret", "admin_token")
_PLACEHOLDERS = {"changeme", "change-me", "secret", "token", "xxx", "..."}


def private_dir(path: Path) -> Path:
    """``path``, made if needed, that only the service's user can enter (0700): the data
    directory holds the database, the tokens file, every blob and log."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def split_csv(value: object) -> object:
    """List settings are comma-separated strings in the environment."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FE_CI_", extra="ignore")

    data_dir: Path = Path("./data")
    database_url: str | None = None
    submit_token: str | None = None
    runner_token: str | None = None  # registers runners, and only that
    webhook_secret: str | None = None
    # the operator's doors: revoking and reinstating runners, re-pinning a comparison point
    admin_token: str | None = None
    repo_url: str = "https://github.com/NVIDIA/cudnn-frontend.git"
    branches: Annotated[list[str], NoDecode] = ["refs/heads/develop"]
    public_url: str = "http://127.0.0.1:8080"
    github_token: str | None = None
    github_api_url: str = "https://api.github.com"
    # A GitHub App (all three set): check runs instead of commit statuses.
    github_app_id: int | None = None
    github_app_private_key: str | None = None  # the App's private key, PEM
    github_app_installation_id: int | None = None
    gpu_archs: Annotated[list[str], NoDecode] = ["auto"]
    # the matrix each build's GPU work expands over (core/cells.py): ``cudnn=host,9.28.1`` makes one
    # GPU job per family x backend; an unknown backend is refused here, at start
    matrix: str = cells.DEFAULT_MATRIX
    gpu_wait_hours: float = Field(default=24.0, ge=0)
    lease_seconds: int = Field(default=120, ge=1)
    max_upload_mb: int = Field(default=1024, ge=1)
    sweep_interval_s: float = Field(default=5.0, gt=0)
    # determinism_cost_regressed: the deterministic/control ratio left the band learned from the
    # series and is more than this factor over the series' median (core.history.cost_band)
    cost_factor: float = Field(default=history.DEFAULT_COST_FACTOR, gt=1.0)
    # A push payload of one commit is about 8 KB (the repository object is most of it); 1 MiB
    # holds hundreds of commit entries. A larger push answers 413, shows as a failed delivery on
    # GitHub's webhook page, and can be redelivered after raising this.
    webhook_max_kb: int = Field(default=1024, ge=1)
    header_timeout_s: float = Field(default=10.0, gt=0)  # connect to the end of the request head
    body_timeout_s: float = Field(default=30.0, gt=0)  # between two chunks of a request body
    # A request body of N bytes must be complete within BODY_DEADLINE_S + N / BODY_MIN_RATE_KB
    # and keep that pace as it arrives (service/uploads/client_limits.py): the 1.32.0 wheel (11.6
    # MB) gets 30 s + 177 s, a push payload of 8 KB 30 s; a client at 1 byte/s is cut after 30 s.
    body_deadline_s: float = Field(default=30.0, gt=0)
    body_min_rate_kb: float = Field(default=64.0, gt=0)  # KiB/s
    max_uploads: int = Field(default=32, ge=1)  # wheel bodies streaming at once
    max_webhooks: int = Field(default=8, ge=1)  # webhook bodies read at once (1 MiB each at most)
    # Wheel checks (zip directory, RECORD hashes) at once; the rest wait, holding no thread. One
    # keeps a core of two for pages while wheels upload (docs/performance.md, "Pages under load").
    upload_checks: int = Field(default=1, ge=1)
    max_connections: int = Field(default=1000, ge=1)
    # Live streams (/builds/{id}/events) open at once, over the service and per client address
    # (service/web/live_hub.py); past either, 503 with Retry-After.
    max_streams: int = Field(default=100, ge=1)
    max_streams_per_client: int = Field(default=10, ge=1)
    # Builds with a job still to run or running (service/jobs/quotas.py): those the submit token
    # queued (submissions and reruns), and all of the service's; past either, 429 with Retry-After.
    max_queued_per_token: int = Field(default=100, ge=1)
    max_queued_builds: int = Field(default=500, ge=1)
    # A blob no build references is removed once this old: an upload commits its build
    # milliseconds after storing the blob, so an hour never touches one in flight.
    orphan_grace_s: float = Field(default=3600.0, ge=0)
    bisect_max_builds: int = Field(default=bisection.DEFAULT_MAX_BUILDS, ge=1, le=64)
    # The required checks that gate a build (core/gate.py says the vocabulary): the report's
    # ``gate`` and GitHub's ``fe-ci`` context follow them; the verdict stays what it is.
    require: Annotated[list[str], NoDecode] = [gate.ALL]
    # A watched branch that turns red, or green again, is told to this URL (service/notifications)
    notify_url: str | None = None
    notify_secret: str | None = None  # signs each body: X-FE-CI-Signature-256: sha256=<hex>
    notify_format: Literal["json", "slack"] = "json"
    notify_retries: int = Field(default=5, ge=1, le=20)  # attempts in a row before waiting long
    notify_backoff_s: float = Field(default=2.0, gt=0)  # the first wait; it doubles, jittered
    notify_give_up_h: float = Field(default=24.0, gt=0)  # an undelivered one is dropped then
    # The release watcher (service/watch/), off unless FE_CI_WATCH: it polls the package index's
    # simple API for new frontend releases and submits each once, on the line of releases.
    watch: bool = False
    watch_index: str | None = None  # the simple index's URL; unset, the index pip would use
    watch_interval_s: float = Field(default=600.0, gt=0)
    # the index away or failing: the wait doubles from FE_CI_WATCH_INTERVAL_S up to this
    watch_max_backoff_s: float = Field(default=3600.0, gt=0)
    # the wheel taken from each release: this CPython tag, manylinux x86_64 (the runners' hosts)
    watch_python: str = Field(default=f"cp{sys.version_info[0]}{sys.version_info[1]}")
    # hosts besides the index's own that a release's files may be downloaded from
    watch_file_hosts: Annotated[list[str], NoDecode] = []
    # releases already out at the first poll that are validated, newest first; the older ones
    # are recorded as seen and never submitted
    watch_backfill: int = Field(default=1, ge=0, le=50)
    watch_max_mb: int = Field(default=256, ge=1)  # a release's wheel; 1.32.0's is 11.6 MB

    _split = field_validator("branches", "gpu_archs", "watch_file_hosts", mode="before")(split_csv)

    @field_validator(
        "submit_token", "runner_token", "webhook_secret", "admin_token", "notify_secret"
    )
    @classmethod
    def _refuse_placeholders(cls, value: str | None) -> str | None:
        if value is not None and (value.lower() in _PLACEHOLDERS or len(value) < 8):
            raise ValueError("a token must be at least 8 characters and not a placeholder")
        return value

    @field_validator("require", mode="before")
    @classmethod
    def _known_requirements(cls, value: object) -> list[str]:
        if not isinstance(value, str | list | tuple):
            raise ValueError("FE_CI_REQUIRE is a comma-separated list")
        return gate.parse_require(value)

    @field_validator("matrix")
    @classmethod
    def _known_matrix(cls, value: str) -> str:
        cells.parse_matrix(value)  # ValueError: the unknown axis or backend, the known ones listed
        return value.strip() or cells.DEFAULT_MATRIX

    @property
    def matrix_axes(self) -> dict[str, tuple[str, ...]]:
        return cells.parse_matrix(self.matrix)

    @field_validator("gpu_archs")
    @classmethod
    def _known_families(cls, value: list[str]) -> list[str]:
        known = ("auto", *FAMILIES)
        bad = [v for v in value if v not in known]
        if bad:
            raise ValueError(f"unknown GPU families {bad}; use {', '.join(known)}")
        return value

    @field_validator("watch_python")
    @classmethod
    def _cpython_tag(cls, value: str) -> str:
        if not re.fullmatch(r"cp3\d{1,2}", value):
            raise ValueError(f"FE_CI_WATCH_PYTHON is a CPython tag such as cp312, not {value!r}")
        return value

    @field_validator("watch_index")
    @classmethod
    def _http_index(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/?#]+", value):
            raise ValueError(f"FE_CI_WATCH_INDEX is an http(s) URL, not {value!r}")
        return value

    @cached_property
    def url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'fe-ci.sqlite3').resolve()}"

    @property
    def alive_window(self) -> timedelta:
        """A runner is alive when seen within this long: two lease periods (a lease is renewed by
        heartbeats, so a runner missing two has stopped)."""
        return timedelta(seconds=2 * self.lease_seconds)

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    @property
    def tokens_file(self) -> Path:
        return self.data_dir / TOKENS_FILE

    def with_generated_tokens(self) -> Settings:
        """Fill unset tokens from ``<data_dir>/tokens.env``, generating and saving them once.

        A first start on a laptop then needs no configuration; the file is mode 0600 and the
        runner and ``fe-ci submit`` read it when they share the data directory. Replicas starting
        at once on one data directory take turns (a lock file), so all hold the same tokens.
        """
        if all(getattr(self, name) is not None for name in TOKEN_NAMES):
            return self
        private_dir(self.data_dir)
        with open(self.data_dir / "tokens.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            saved = read_tokens_file(self.tokens_file)
            values = {}
            for name in TOKEN_NAMES:
                if getattr(self, name) is None:
                    values[name] = saved.get(name) or secrets.token_urlsafe(24)
            merged = {**saved, **values}
            if merged != saved:
                tmp = self.tokens_file.with_suffix(".tmp")
                tmp.unlink(missing_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
                with os.fdopen(os.open(tmp, flags, 0o600), "w") as fh:
                    fh.write("".join(f"FE_CI_{k.upper()}={v}\n" for k, v in sorted(merged.items())))
                tmp.replace(self.tokens_file)
        return self.model_copy(update=values)


def read_tokens_file(path: Path) -> dict[str, str]:
    """A tokens file's ``FE_CI_<NAME>`` values by the setting's name (``submit_token``)."""
    return {k[len("FE_CI_") :].lower(): v for k, v in read_tokens(path).items()}
