"""The stage order, shared by the agent (a job from the service) and ``fe-ci validate`` and
``fe-ci bisect`` (local).

install -> probe -> determinism (+ numerics, from the same process) -> refusal (a job that reuses
the CPU job's decisions: the frontend's own rows, from the determinism stage's process where it
ran). Each candidate-side stage is a subprocess of the candidate's Python, in its own process
group with a timeout, with a private copy of ``runner/inside`` on its path and nothing else of the
runner (``candidate.py`` starts it). What a run is asked to do is ``pipeline_options.py``; what
it hands back, ``stage_results.py``; the install stage, ``install_stage.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core import bounds, regression, subjects, surface
from core.frontend_refusals import FRONTEND_ONLY
from core.subjects import SUBJECTS
from core.verdict import ENDED_WELL, ERRORED
from core.wire import STAGE_ORDER, Check, Environment, Finding, Stage, StageResult, Status
from runner.cache import compile_cache, compile_keys
from runner.envs import envs, host, layers
from runner.isolation import candidate, jail, jobbox, redact, sandbox, stage_source, uids
from runner.pipeline import install_stage, ledger
from runner.pipeline.pipeline_options import Options
from runner.pipeline.stage_results import (
    Result,
    accepted,
    failed_stage,
    libcudnn,
    redacted,
    rows_from_determinism,
    stage_from_doc,
)

if TYPE_CHECKING:
    from runner.isolation.zygotes import Zygote

log = logging.getLogger("fe_ci.pipeline")
SUBJECTS_LEFT_OUT = "excluded by --subjects"


class Reporter(Protocol):
    def started(self, stage: Stage) -> None: ...

    def finished(self, result: StageResult) -> None: ...


class NullReporter:
    def started(self, stage: Stage) -> None:
        pass

    def finished(self, result: StageResult) -> None:
        pass


class Pipeline:
    def __init__(self, opts: Options, reporter: Reporter | None = None) -> None:
        self.opts = opts
        self.reporter = reporter or NullReporter()
        self.cancel = threading.Event()
        self.result = Result(negative_control=opts.negative_control)
        self.python: Path = opts.candidate_python or Path(sys.executable)
        self._src: Path | None = None
        self._extra: dict[str, Any] = {}
        self._layer: layers.Layer | None = None  # the layer the env was installed on
        self._warm = False  # the env is exactly ``_layer`` (or nothing) + the candidate
        self._job: jobbox.JobBox | None = None
        self._held = contextlib.ExitStack()  # the job's uid, while the run lasts
        self._warm_stages: list[Stage] = []  # forked from a warm worker, as its uid
        self._backend: install_stage.Backend | None = None  # the job's cuDNN backend layer

    # ------------------------------------------------------------------ plumbing

    def job(self) -> jobbox.JobBox:
        """The job's directory and uid (taken from the runner's range on first use)."""
        if self._job is None:
            uid = self._held.enter_context(self.opts.uids.lease())
            self._job = jobbox.JobBox(self.opts.work_dir, uid, hidden=self.opts.private)
            self._job.prepare()
        return self._job

    def close(self) -> None:
        """Give the job's uid back: every process still running as it is killed, and what it
        owned of the job's directory is the runner's again (the uid serves another job later)."""
        self._held.close()
        if self._job is not None:
            uids.take_back(self._job.own)
        self._job = None

    def _reads(self) -> tuple[Path, ...]:
        """What a stage reads outside the job's directory: the layer, a registry extension, an
        interpreter of the user's (``--preinstalled``)."""
        out = [self._layer.root] if self._layer is not None else []
        if self._backend is not None:
            out.append(self._backend.layer.root)
        if extra := os.environ.get(subjects.EXTRA_SUBJECTS_ENV):
            out.append(subjects.extra_home(extra))
        if self.opts.preinstalled:
            out += [*jobbox.interpreter_dirs(self.python), *self._candidate_sites()]
        return tuple(out)

    def _emit(self, result: StageResult) -> None:
        result = redacted(result, self.opts.secrets)  # nothing of a runner secret leaves
        self.result.stages.append(result)
        self.reporter.finished(result)

    def _skip_rest(self, stages: list[Stage], reason: str, status: Status = Status.skipped) -> None:
        for stage in stages:
            self.reporter.started(stage)
            self._emit(StageResult(name=stage, status=status, reason=reason))

    def run_inside(
        self, stage: Stage, params: dict[str, Any], rw: tuple[Path, ...] = ()
    ) -> StageResult:
        job = self.job()
        if self._src is None:
            self._src = stage_source.private_source(job.work)
        outcome, out_path = candidate.run_stage(
            stage,
            params,
            job=job,
            src=self._src,
            python=self.python,
            zygote=self._zygote(stage),
            timeout_s=self.opts.stage_timeout_s,
            cancel=self.cancel,
            rw=rw,
            ro=self._reads(),
            lib_dirs=self._backend.lib_dirs if self._backend else (),
        )
        if outcome.warm and stage not in self._warm_stages:
            self._warm_stages.append(stage)
        secrets = self.opts.secrets
        # a document is read only as a regular file, not followed, bounded (``read_doc``): what
        # else the candidate left there is its stage's error, never the runner's
        if not outcome.ok or not os.path.lexists(out_path):
            if outcome.ok:
                outcome = sandbox.Outcome("failed", 0, None, outcome.duration_s, outcome.log_tail)
            return redacted(failed_stage(stage, outcome), secrets)
        doc, why = candidate.read_doc(stage, out_path)
        doc = redact.redact(doc, secrets)
        outcome = sandbox.Outcome(
            outcome.status,
            outcome.returncode,
            outcome.signal,
            outcome.duration_s,
            redact.redact_text(outcome.log_tail, secrets),
        )
        result = why or accepted(stage, doc, outcome.duration_s)
        if isinstance(result, str):
            return StageResult(
                name=stage,
                status=Status.error,
                reason=f"the {stage} stage wrote a document the runner does not accept: {result}",
                duration_s=outcome.duration_s,
                log_tail=outcome.log_tail,
            )
        self._extra[stage] = doc
        if result.status in (Status.error,) and not result.log_tail:
            result.log_tail = outcome.log_tail
        return result

    def _zygote(self, stage: Stage) -> Zygote | None:
        """A warm parent for this stage, where one may serve: CPU-only stages (the probe; the
        refusal decisions of a job with no GPU family) of a build installed on the warm path, on
        its layer (or none) and its cell's cuDNN backend (the zygote of that library)."""
        o, b = self.opts, self._backend
        if o.zygotes is None or not self._warm or (o.cudnn is not None and b is None):
            return None
        if stage != Stage.probe and not (stage == Stage.refusal and o.family is None):
            return None
        return o.zygotes.get(self._layer, (b.layer, b.lib_dirs) if b else None)

    # ------------------------------------------------------------------ stages

    def install(self, wheel: Path | None) -> StageResult:
        done = install_stage.install(self.opts, wheel, self.python, self.job())
        done, self._backend = install_stage.install_backend(self.opts, done, self.job())
        self.python, self._layer, self._warm = done.python, done.layer, done.warm
        return done.result

    def probe(self) -> StageResult:
        # an environment this runner made, or its own interpreter, must import the host's torch
        own = not self.opts.preinstalled or self.python == Path(sys.executable)
        expect_torch = own and host.host_torch() is not None
        params = {"expect_torch": expect_torch, "surface": self.opts.probe_surface}
        result = self.run_inside(Stage.probe, params)
        if result.status in ERRORED:
            return result
        doc = self._extra.get(Stage.probe, {})
        self.result.capabilities = dict(result.capabilities)
        self.result.version = result.version
        env = doc.get("environment") or {}
        self.result.environment = self.result.environment.model_copy(
            update={k: env.get(k) for k in ("python", "torch", "cutlass_dsl", "cudnn_backend")}
            | {"libcudnn": libcudnn(env) or {"torch": [], "frontend": []}}
        )
        if result.version:
            result.findings += ledger.ledger_findings(result.version, doc.get("features") or {})
            result.findings = ledger.claimed_import_errors(result.version, result.findings)
        if self.opts.previous is not None:
            previous = self.opts.previous
            result.findings = regression.upgrade_import_errors(result.findings, previous)
            result.findings += regression.regressions(
                previous, result.capabilities, findings=result.findings
            )
        if self.opts.previous_surface and self.opts.probe_surface:
            now = [k.model_dump() for k in result.surface]
            changed = surface.changes(self.opts.previous_surface, now)
            result.findings += [Finding.model_validate(f) for f in changed]
        return result

    def _candidate_sites(self) -> list[Path]:
        """Where the candidate and its DSL are installed, found without running the candidate."""
        if not self.opts.preinstalled:
            dirs = [envs.CandidateEnv(self.python.parent.parent).site_packages()]
            if self._layer is not None:
                dirs.append(self._layer.site_packages)
        elif self.python == Path(sys.executable):
            dirs = [Path(p) for p in sys.path if p]
        else:
            dirs = compile_keys.interpreter_sites(self.python)
        if (torch := host.host_torch()) is not None:
            dirs.append(torch.site_dir)
        return [d for d in dirs if d.is_dir()]

    def _prepare_compile_cache(self) -> compile_cache.StageCache:
        """The stage's own cache directory: the published entries of its keys, linked read-only.

        Without a cache root, or without a candidate to key on, a throwaway directory.
        """
        o = self.opts
        sites = self._candidate_sites() if o.compile_cache_dir is not None else []
        cache = compile_cache.open_stage(
            o.compile_cache_dir, sites, family=o.family, gpu=o.gpu, trusted=o.trusted_source
        )
        if cache is None:  # in the job's directory: throwaway
            cache = compile_cache.StageCache(dir=self.job().work / "compile-cache")
            cache.dir.mkdir(parents=True, exist_ok=True)
        return cache

    def determinism(self) -> tuple[StageResult, StageResult]:
        o = self.opts
        cache = self._prepare_compile_cache()
        params: dict[str, Any] = {
            "family": o.family,
            "capabilities": {k: v.model_dump() for k, v in self.result.capabilities.items()},
            "repeats": o.repeats,
            "max_repeats": o.max_repeats,
            "luck_target": o.luck_target,
            "control_share": o.control_share,
            "start_configs": o.start_configs,
            "remembered": [r.model_dump() for r in o.remembered],
            "subjects": o.subjects,
            "pin_config": o.pin_config,
            "comparison": [p.model_dump() for p in o.comparison],
            "negative_control": o.negative_control,
            "compile_cache_dir": str(cache.dir),
            "compile_cache_key": cache.key,
            "compile_cache_source_key": cache.source_key,
            "launched_at": time.time(),  # the stage's timings["stage"]["ready_s"] counts from it
        }
        if o.refusal_scope == FRONTEND_ONLY and Stage.refusal in o.stages:  # no interpreter of
            params["frontend_refusal"] = {"family": o.family}  # its own: ``refusal()``
        # written by the job's uid during the stage only, taken back before anything is published:
        # no process of the stage is left to add a file (``jobbox.JobBox.writing``)
        result = self.run_inside(Stage.determinism, params, rw=(cache.dir,))
        if words := cache.finish():
            result.reason += f"; {words}"
        doc = self._extra.get(Stage.determinism, {})
        numerics_doc = doc.get("numerics")
        if isinstance(numerics_doc, dict):
            numerics = stage_from_doc(Stage.numerics, numerics_doc, 0.0)
        else:
            numerics = StageResult(
                name=Stage.numerics,
                status=Status.skipped if result.status == Status.skipped else Status.error,
                reason=result.reason or "the determinism stage reported no numerics",
            )
        if o.report_unselected and o.subjects is not None:  # said, not left to look unrun
            result.checks += [
                Check(name=f"{n}.deterministic", status=Status.skipped, detail=SUBJECTS_LEFT_OUT)
                for n in SUBJECTS
                if n not in o.subjects
            ]
        self.result.chosen_configs.update(doc.get("chosen_configs") or {})
        env = doc.get("environment") or {}
        if env:
            update = {k: v for k, v in env.items() if k in Environment.model_fields and v}
            if seen := libcudnn(env):  # a stage that mapped none leaves the probe's word
                update["libcudnn"] = seen
            self.result.environment = self.result.environment.model_copy(update=update)
        return result, numerics

    def refusal(self) -> StageResult:
        # reusing the CPU job's decisions: the frontend's rows, made in the determinism stage's
        # process where it ran them (a fresh interpreter costs more than the rows)
        reused = self.opts.refusal_scope == FRONTEND_ONLY
        if reused and (ran := rows_from_determinism(self._extra.get(Stage.determinism, {}))):
            return ran
        params = {
            "family": self.opts.family,
            "scope": self.opts.refusal_scope,
            "capabilities": {k: v.model_dump() for k, v in self.result.capabilities.items()},
        }
        return self.run_inside(Stage.refusal, params)

    # ------------------------------------------------------------------ the run

    def run(self, wheel: Path | None) -> Result:
        """Run the selected stages in order; what is not selected is reported ``skipped``."""
        try:
            return self._run(wheel)
        finally:
            self.close()

    def _run(self, wheel: Path | None) -> Result:
        o = self.opts
        o.work_dir.mkdir(parents=True, exist_ok=True)
        self.result.environment = Environment(
            python=None,
            gpu=o.gpu,
            arch=o.family,
            sandbox=sandbox.isolation(),
            cudnn_requested=o.cudnn,
        )
        selected = [s for s in STAGE_ORDER if s in o.stages and s != Stage.build]
        if Stage.build in o.stages:
            self._emit(
                StageResult(
                    name=Stage.build, status=Status.not_applicable, reason="a wheel needs no build"
                )
            )
        # probe results feed every later stage: run it whenever a later stage is selected
        needs_probe = any(s in selected for s in (Stage.determinism, Stage.numerics, Stage.refusal))
        order: list[Stage] = [
            s for s in STAGE_ORDER if s in selected or (s == Stage.probe and needs_probe)
        ]
        if Stage.install not in order:  # always: it installs, or says the candidate was there
            order.insert(0, Stage.install)
        pending: list[Stage] = list(order)
        while pending:
            stage = pending.pop(0)
            if self.cancel.is_set():
                self._skip_rest([stage, *pending], "cancelled")
                break
            self.reporter.started(stage)
            if stage == Stage.install:
                res = self.install(wheel)
            elif stage == Stage.probe:
                res = self.probe()
            elif stage == Stage.determinism:
                res, numerics = self.determinism()
                self._emit(res)
                if Stage.numerics in pending:
                    pending.remove(Stage.numerics)
                    self.reporter.started(Stage.numerics)
                    self._emit(numerics)
                continue
            elif stage == Stage.numerics:  # selected without determinism: it needs those runs
                res, numerics = self.determinism()
                res = numerics
            else:
                res = self.refusal()
            self._emit(res)
            if stage == Stage.install and res.status not in ENDED_WELL:
                self._skip_rest(pending, "install failed")
                break
            # fail: the candidate does not import, so nothing later could run it
            if stage == Stage.probe and res.status in ERRORED | {Status.fail}:
                self._skip_rest(pending, "probe failed")
                break
        for stage in STAGE_ORDER if o.report_unselected else ():
            if stage == Stage.build or any(s.name == stage for s in self.result.stages):
                continue
            if stage in o.stages:
                continue
            self._emit(StageResult(name=stage, status=Status.skipped, reason=o.skip_reason))
        self.result.stages.sort(key=lambda s: STAGE_ORDER.index(s.name))
        self._say_shared_uid()
        return self.result

    def _say_shared_uid(self) -> None:
        """A stage forked from a warm worker ran as the worker's uid, which serves every job of
        its layer, not as the job's own: the report's ``sandbox`` says so."""
        if not self._warm_stages or not jail.mechanism().uid_drop:
            return
        names = ",".join(str(s) for s in self._warm_stages)
        said = f"{self.result.environment.sandbox}; uid shared: {names} ran in a warm worker"
        self.result.environment = self.result.environment.model_copy(
            update={"sandbox": said[: bounds.NAME_CHARS]}
        )
