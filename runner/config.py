"""The runner's settings, from the environment (prefix ``FE_CI_``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core import bisection, harness, history
from core.redaction import TOKENS_FILE, read_tokens
from runner.isolation import redact, uids


def _labels(value: object) -> object:
    """``arch=sm_90,builder=1`` -> {"arch": "sm_90", "builder": "1"}."""
    if isinstance(value, str):
        out: dict[str, str] = {}
        for item in value.split(","):
            key, _, val = item.strip().partition("=")
            if key:
                out[key.strip()] = val.strip() or "1"
        return out
    return value


def _word(value: object) -> object:
    """A choice as written, in any case and with spaces around it: `` BWRAP`` is ``bwrap``."""
    return value.strip().lower() if isinstance(value, str) else value


class RunnerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FE_CI_", extra="ignore")

    url: str = "http://127.0.0.1:8080"
    runner_token: str | None = None
    submit_token: str | None = None
    admin_token: str | None = None  # fe-ci pin: the service's operator door
    runner_name: str = Field(default_factory=lambda: socket.gethostname().split(".")[0] or "runner")
    runner_labels: Annotated[dict[str, str] | None, NoDecode] = None
    runner_replace: bool = False  # take the name over from a live runner (``--replace``)
    wheelhouse: Path | None = None
    index_url: str | None = None
    cache_dir: Path = Path.home() / ".cache" / "fe-ci"
    # the dependency layers (runner/envs/layers.py); default ``cache_dir/layers``. Runners of one
    # host with cache dirs of their own may point here at one place and build each layer once.
    layers_dir: Path | None = None
    # the compile cache that survives builds (runner/cache/compile_cache.py); default
    # ``cache_dir/compile-cache``. Runners of one host may share one: an entry is published once,
    # by a link that never replaces another runner's.
    compile_cache_dir: Path | None = None
    data_dir: Path = Path("./data")
    stage_timeout_s: float = Field(default=1800.0, gt=0)
    # how candidate code is isolated (``runner/isolation/jail.py``): ``auto`` takes the first this
    # host allows; ``none`` is a process group without a uid of its own
    sandbox: Literal["auto", "bwrap", "unshare", "pgroup", "none"] = "auto"
    # who installs candidates (``runner/envs/envs.py``): ``auto`` and ``uv`` take uv where present
    installer: Literal["auto", "uv", "pip"] = "auto"
    install_timeout_s: float = Field(default=1800.0, gt=0)
    repeats: int = Field(default=harness.REPEATS, ge=2)
    max_repeats: int = Field(default=harness.MAX_REPEATS, ge=2)
    luck_target: float = Field(default=harness.LUCK_TARGET, gt=0, lt=1)
    control_share: float = Field(default=harness.CONTROL_SHARE, gt=0, le=1)
    # validate --previous: the cost regression gate, as the service's (core.history.cost_band)
    cost_factor: float = Field(default=history.DEFAULT_COST_FACTOR, gt=1.0)
    # fe-ci bisect: step builds between GOOD and BAD at most, as a bisection of the service
    bisect_max_builds: int = Field(default=bisection.DEFAULT_MAX_BUILDS, ge=1, le=64)
    poll_interval_s: float = Field(default=2.0, gt=0)
    claim_wait_s: float = Field(default=20.0, ge=0, le=30)
    # back-off through a service outage: jittered, doubling from the first wait up to the cap
    retry_initial_s: float = Field(default=1.0, gt=0)
    retry_max_s: float = Field(default=30.0, gt=0)
    # keep warm parents (torch and the dependency layer imported) for the CPU stages
    warm_workers: bool = True
    # compile the host torch's bytecode once at start where it has none (``envs.host``)
    host_bytecode: bool = True
    # the uids candidates run as (one per job, one per warm parent), where the runner is root;
    # runners sharing a host share the range through host-wide locks (``runner/isolation/uids.py``)
    sandbox_uid_base: int = Field(default=200_000, ge=1000, lt=2**31)
    sandbox_uid_span: int = Field(default=10_000, ge=16, le=1_000_000)
    # every sandbox's limits (``runner/isolation/limits.py``; 0 turns one off): processes (threads
    # count), memory (a cgroup's; never RLIMIT_AS, which CUDA's address-space reservations exceed),
    # the size of each private tmpfs (/tmp, /var/tmp, /dev/shm), what a stage writes in its job dir
    sandbox_pids: int = Field(default=4096, ge=0)
    sandbox_memory_mb: int = Field(default=32768, ge=0)
    sandbox_tmp_mb: int = Field(default=2048, ge=0)
    job_dir_mb: int = Field(default=8192, ge=0)
    # the bounds of the dependency layers and of the compile cache (``runner/lru.py``):
    # past one, after a job, the least recently used are removed, never one used within
    # ``cache_unused_s``
    layers_max_gb: float = Field(default=40.0, gt=0)
    compile_cache_max_gb: float = Field(default=40.0, gt=0)
    cache_unused_s: float = Field(default=6 * 3600.0, ge=0)

    _split = field_validator("runner_labels", mode="before")(_labels)
    _choice = field_validator("sandbox", "installer", mode="before")(_word)

    def uid_range(self) -> uids.UidRange:
        return uids.UidRange.default(self.sandbox_uid_base, self.sandbox_uid_span)

    def layers_path(self) -> Path:
        return Path(self.layers_dir or Path(self.cache_dir) / "layers")

    def compile_cache_path(self) -> Path:
        return Path(self.compile_cache_dir or Path(self.cache_dir) / "compile-cache")

    def private_dirs(self) -> tuple[Path, ...]:
        """What no candidate sees: the local service's data directory (its database, its tokens
        file), the runner's cache, its layers and its compile cache (each job, warm parent and
        compile-cache stage is shown its own part again: its job directory, its one layer, its
        stage's linked entries)."""
        dirs = (Path(self.data_dir).resolve(), Path(self.cache_dir).resolve())
        apart = [self.layers_path().resolve(), self.compile_cache_path().resolve()]
        return (*dirs, *(d for d in apart if not d.is_relative_to(dirs[1])))

    def secrets(self) -> tuple[str, ...]:
        """Every secret value this runner holds (``runner/isolation/redact.py``)."""
        saved = read_tokens(self.data_dir / TOKENS_FILE)
        secret = [v for k, v in saved.items() if redact.is_secret_name(k)]
        return redact.runner_secrets(extra=[self.runner_token, self.submit_token, *secret])

    def token(self, name: str) -> str | None:
        """A token from the environment, else from the local service's generated tokens file."""
        value = getattr(self, name)
        if value:
            return str(value)
        return read_tokens(self.data_dir / TOKENS_FILE).get(f"FE_CI_{name.upper()}")
