"""The environment each command reads, said at the end of its ``--help``.

Every setting is an ``FE_CI_`` variable (README, "Configuration"). A command names each variable
it reads: the ones that matter most with a word on each, then the rest of the settings it takes.
``tests/functional/test_cli_environment.py`` runs each command and checks that every setting it
read is named here. The service's names are listed here, not read from ``service.config``: the
commands import the service only inside ``serve`` (a test holds the list to the settings).
"""

from __future__ import annotations

import inspect

from core.subjects import EXTRA_SUBJECTS_ENV

# The service's settings (service/config.py), as its README table has them.
SERVICE = (
    *("data_dir", "database_url", "submit_token", "runner_token", "webhook_secret", "admin_token"),
    *("repo_url", "branches", "public_url", "github_token", "github_api_url", "github_app_id"),
    *("github_app_private_key", "github_app_installation_id", "gpu_archs", "gpu_wait_hours"),
    *("lease_seconds", "max_upload_mb", "sweep_interval_s", "cost_factor", "webhook_max_kb"),
    *("header_timeout_s", "body_timeout_s", "body_deadline_s", "body_min_rate_kb", "max_uploads"),
    *("max_webhooks", "upload_checks", "max_connections", "max_streams", "max_streams_per_client"),
    *("max_queued_per_token", "max_queued_builds", "orphan_grace_s", "bisect_max_builds"),
    *("require", "notify_url", "notify_secret", "notify_format", "notify_retries"),
    *("notify_backoff_s", "notify_give_up_h", "matrix"),
    *("watch", "watch_index", "watch_python", "watch_interval_s", "watch_max_backoff_s"),
    *("watch_backfill", "watch_max_mb", "watch_file_hosts"),
)
# What running the stages on a build reads (validate, bisect, and each job of a runner).
PIPELINE = (
    *("wheelhouse", "index_url", "cache_dir", "layers_dir", "compile_cache_dir"),
    *("stage_timeout_s", "sandbox", "installer", "install_timeout_s", "repeats", "max_repeats"),
    *("luck_target", "control_share", "warm_workers", "sandbox_uid_base", "sandbox_uid_span"),
    *("sandbox_pids", "sandbox_memory_mb", "sandbox_tmp_mb", "job_dir_mb"),
)
_URL = ("url", "the service, default http://127.0.0.1:8080")
_DATA = ("data_dir", "a local service's data directory, default ./data, whose tokens.env is read")
_LABELS = (
    "runner_labels",
    "the host's labels, e.g. arch=sm_90: the GPU family is detected (arch=none: offer no GPU)",
)
_SECRETS = ("runner_token submit_token data_dir", "kept out of the logs")
# command -> the variables said with a word each, then the other settings it reads
_TOKEN = "token; beside a local service read from DATA_DIR/tokens.env"
# command -> the variables said with a word each, then the other settings it reads
SAID: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "serve": ((("data_dir", "database, wheels, generated tokens; default ./data"),), SERVICE[1:]),
    "runner": (
        (
            _URL,
            ("runner_token", f"the registration {_TOKEN}"),
            ("runner_name", "default the host name"),
            _LABELS,
            ("runner_replace", "as --replace"),
        ),
        (
            *("data_dir", "submit_token", "poll_interval_s", "claim_wait_s", "retry_initial_s"),
            *("retry_max_s", "layers_max_gb", "compile_cache_max_gb", "cache_unused_s"),
            "host_bytecode",
            *PIPELINE,
        ),
    ),
    "submit": ((_URL, ("submit_token", f"the submit {_TOKEN}"), _DATA), ()),
    "validate": (
        (_LABELS, ("cost_factor", "with --previous: the cost regression's factor"), _SECRETS),
        PIPELINE,
    ),
    "bisect": ((("bisect_max_builds", "as --max-builds"), _LABELS, _SECRETS), PIPELINE),
    "pin": ((_URL, ("admin_token", f"re-pinning only: the admin {_TOKEN}"), _DATA), ()),
    "configs": ((), ()),
}


def var(field: str) -> str:
    return f"FE_CI_{field.upper()}"


def names(command: str) -> set[str]:
    """Every variable ``command``'s help names."""
    said, rest = SAID[command]
    fields = [f for spaced, _ in said for f in spaced.split()] + list(rest)
    return {var(f) for f in fields} | {EXTRA_SUBJECTS_ENV}


def section(command: str) -> str:
    """``Environment: FE_CI_URL (the service, ...), ...; also FE_CI_...``: one paragraph."""
    said, rest = SAID[command]
    parts = []
    for spaced, word in said:
        shown = ", ".join(var(f) for f in spaced.split())
        parts.append(f"{shown} ({word})" if word else shown)
    parts.append(f"{EXTRA_SUBJECTS_ENV} (more subject declarations, a file or folder)")
    text = "Environment: " + "; ".join(parts)
    if rest:
        what = "the service's settings" if command == "serve" else "the runner settings"
        text += f"; and {what} (README, Configuration): " + ", ".join(var(f) for f in rest)
    return text + "."


def help_text(command: str, doc: str | None) -> str:
    """The command's docstring, then what it reads from the environment."""
    return f"{inspect.cleandoc(doc or '')}\n\n{section(command)}"
