"""What one pipeline run is asked to do (``Options``), and the one place the runner's settings
become options: ``Options.from_settings``, used by the agent, ``fe-ci validate`` and ``fe-ci
bisect`` alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import harness
from core.wire import Capability, ComparisonPoint, RememberedConfig, Stage
from runner.config import RunnerSettings
from runner.isolation import redact, uids

if TYPE_CHECKING:
    from runner.isolation.zygotes import Zygotes


@dataclass
class Options:
    stages: list[Stage]
    work_dir: Path
    preinstalled: bool = False
    candidate_python: Path | None = None
    index_url: str | None = None
    wheelhouse: Path | None = None
    stage_timeout_s: float = 1800.0
    install_timeout_s: float = 1800.0
    repeats: int = harness.REPEATS
    max_repeats: int = harness.MAX_REPEATS
    luck_target: float = harness.LUCK_TARGET
    control_share: float = harness.CONTROL_SHARE
    negative_control: bool = False
    family: str | None = None
    # the cuDNN backend the stages load (a version, installed as a layer: runner/envs/backend.py);
    # None: the host's own
    cudnn: str | None = None
    gpu: str | None = None
    start_configs: dict[str, str] = field(default_factory=dict)  # {subject: config}, as given
    # configs earlier builds chose (a lease's, or --previous's); the stage keeps its host's
    remembered: list[RememberedConfig] = field(default_factory=list)
    subjects: list[str] | None = None  # determinism/numerics: these subjects only (None: all)
    pin_config: str | None = None  # run at this config, no escalation (a repro line's --config)
    # each subject's comparison point (a lease's pins, or --previous's points)
    comparison: list[ComparisonPoint] = field(default_factory=list)
    # the service says the build is a commit of its repository built by its builder: compiled
    # kernels are then also published under the key of their sources (runner/cache/compile_cache.py)
    trusted_source: bool = False
    # the refusal stage's rows: "all", or "frontend" (the frontend's own refusal rows only: a GPU
    # job whose consumer rows are the CPU job's decisions, reused; the lease says which)
    refusal_scope: str = "all"
    probe_surface: bool = True  # False: the build's CPU job reads it (the lease says)
    previous: dict[str, Capability] | None = None
    # the previous report's determinism surface (--previous): knobs removed, changed, added
    previous_surface: list[dict[str, Any]] | None = None
    compile_cache_dir: Path | None = (
        None  # persistent across builds (runner/cache/compile_cache.py)
    )
    layers_dir: Path | None = None  # dependency layers (runner/envs/layers.py); None: plain install
    # warm parents for the CPU stages of warm-path builds (a long-running runner keeps them)
    zygotes: Zygotes | None = None
    skip_reason: str = "excluded by --stages"
    # validate: yes (a stage --stages left out, a subject --subjects left out, is said so); a
    # service job: its stage list is the job
    report_unselected: bool = True
    # the uids the job's candidate runs as; the runner's directories no candidate may see; the
    # values taken out of everything a candidate wrote before it leaves the runner
    uids: uids.UidRange = field(default_factory=uids.UidRange.default)
    private: tuple[Path, ...] = ()
    secrets: tuple[str, ...] = field(default_factory=redact.runner_secrets)

    @classmethod
    def from_settings(
        cls, s: RunnerSettings, *, stages: list[Stage], work_dir: Path, **run: Any
    ) -> Options:
        """What the runner's settings decide, for the agent, ``fe-ci validate`` and ``fe-ci bisect``
        alike; ``run`` holds what this one run decides (its family, GPU, previous report, ...).
        Everything of the runner's cache dir (``FE_CI_CACHE_DIR``) lives under it, the dependency
        layers and the compile cache too unless ``FE_CI_LAYERS_DIR`` and ``FE_CI_COMPILE_CACHE_DIR``
        put them elsewhere."""
        return cls(
            stages=stages,
            work_dir=work_dir,
            index_url=s.index_url,
            wheelhouse=s.wheelhouse,
            stage_timeout_s=s.stage_timeout_s,
            install_timeout_s=s.install_timeout_s,
            repeats=s.repeats,
            max_repeats=s.max_repeats,
            luck_target=s.luck_target,
            control_share=s.control_share,
            compile_cache_dir=s.compile_cache_path(),
            layers_dir=s.layers_path(),
            uids=s.uid_range(),
            private=s.private_dirs(),
            secrets=s.secrets(),
            **run,
        )
