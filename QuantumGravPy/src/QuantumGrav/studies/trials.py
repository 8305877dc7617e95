"""A study's trials as one worker runs them: asking for a trial, training it (``QG.launch``, or every rank of a
torchrun job, see ``tune_ddp``), the pruner's vote (``PruneTrial``), and recording how it ended."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from ..callbacks.base import Callback, Stop
from ..config.yaml_io import apply_overrides
from ..config.schema import validate_config
from ..common.errors import ConfigError, Preempted, UserError
from ..jobs.launcher import TrainingFailed, launch
from ..common.logging_utils import get_logger
from .search_space import short_text
from .config import StudySettings, problem_lines
from .report import write_study_outputs
from .storage import MAX_RETRIES, fail_stale_trials, heartbeat, open_storage, retried_as, retry_now

logger = get_logger("tune")
WAIT_POLL_S = 2.0  # while other workers' trials would complete the study: how often to look again
MAX_CONSECUTIVE_FAILURES = 10  # a worker whose trials all fail has a broken config, not bad luck
TRIALS_DIR = "trials"
# A trial's reason while it runs (what it stays if its worker dies) and when it is interrupted: both are retried.
WORKER_LOST_REASONS = ("its worker stopped without reporting (killed, or its node lost)",
                       "interrupted (SIGTERM or Ctrl-C); retried")
CLAIMED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)


class StudyFailed(RuntimeError):
    """This worker cannot go on: its last MAX_CONSECUTIVE_FAILURES trials failed, not all on bad input, or
    (under torchrun) rank 0 failed."""


def trial_name(number: int) -> str:
    return f"trial_{number:04d}"


@dataclass
class Outcome:
    """How a trial ended: COMPLETE (its value), PRUNED, FAIL (``user_error``: on bad input), and why."""

    state: TrialState
    value: float | None = None
    reason: str = ""
    user_error: bool = False

    @classmethod
    def failed(cls, err: BaseException | str, user_error: bool = False) -> Outcome:
        return cls(TrialState.FAIL, reason=one_line(err), user_error=user_error)


def one_line(err: BaseException | str) -> str:
    if isinstance(err, ConfigError):
        return "; ".join(problem_lines(err))
    return " ".join(str(err).split()) or type(err).__name__


def outcome_of_run(result: dict[str, Any], metric: str) -> Outcome:
    """A finished run: PRUNED when the pruner's vote stopped it, else COMPLETE with the metric at its best
    epoch (the checkpoint the run keeps and tests)."""
    summary, history = result["summary"], result["history"]
    if summary.get("stopped_by") == PruneTrial.__qualname__:
        return Outcome(TrialState.PRUNED, reason=summary.get("stop_reason", ""))
    best = next((r for r in history if r["epoch"] == summary.get("best_epoch")), None)
    if best is None or not math.isfinite(best.get(metric, math.nan)):
        return Outcome.failed(f"no epoch gave a finite {metric} (the training diverged)")
    return Outcome(TrialState.COMPLETE, best[metric], f"{summary.get('stop_reason', '')}; best epoch {best['epoch']}")


class PruneTrial(Callback):
    """Rank 0 reports every epoch's validation metric to the trial and votes to stop when the pruner says
    so; the loop's vote reduction stops every rank at that epoch.

    It travels pickled to the trial's rank 0 (a spawned process), so it holds only names and numbers, and
    opens the storage there, at the first report, through a connection of that process's own.
    """

    main_process_only = True

    def __init__(self, storage: str, study: str, trial_id: int, metric: str, pruner_type: type,
                 pruner_kwargs: dict[str, Any]):
        self.storage, self.study, self.trial_id, self.metric = storage, study, trial_id, metric
        self.pruner_type, self.pruner_kwargs = pruner_type, dict(pruner_kwargs)
        self._trial = None

    def on_fit_start(self, state) -> None:
        reported = [f"val_{m}" for m in state.task.metric_names]
        if self.metric not in reported:
            raise ConfigError(f"tune.metric: {self.metric} is not reported by the {state.task.type} task of "
                              f"this data; expected one of {', '.join(reported)}")

    def on_epoch_end(self, state, record: dict[str, Any]) -> Stop | None:
        if self._trial is None:
            study = optuna.load_study(study_name=self.study, storage=open_storage(self.storage),
                                      sampler=optuna.samplers.RandomSampler(),
                                      pruner=self.pruner_type(**self.pruner_kwargs))
            self._trial = optuna.trial.Trial(study, self.trial_id)
        value, epoch = float(record[self.metric]), int(record["epoch"])
        self._trial.report(value, epoch)
        if self._trial.should_prune():
            return Stop(f"pruned by {self.pruner_type.__name__} at epoch {epoch} ({self.metric} {value:.4g})")
        return None

    def teardown(self, state) -> None:
        self._trial = None


def claim_position(trial) -> int:
    """Where a trial stands in the order of claims: a retry stands where the trial it retries stood."""
    history = trial.system_attrs.get("retry_history")
    return history[0] if history else trial.number


def awaiting_retry(trial, retries: dict[int, int]) -> bool:
    """A trial failed for its dead or interrupted worker whose retry is not enqueued yet. Failing it and enqueuing
    its retry are two writes to the storage: a worker that asks between them must still count its place, or it
    runs a new trial there and the retry then finds the study's trials claimed (seen once in the suite)."""
    if trial.state != TrialState.FAIL or not trial.user_attrs.get("reason", "").startswith(WORKER_LOST_REASONS):
        return False
    if len(trial.system_attrs.get("retry_history", [])) >= MAX_RETRIES:
        return False  # no retry will come
    return trial.number not in retries


class StudyWorker:
    """One worker's part in a study: what to do next, asking for trials, recording how they ended."""

    def __init__(self, settings: StudySettings, base: dict[str, Any], study):
        self.settings, self.base, self.study = settings, base, study
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.failures: list[Outcome] = []  # this worker's failed trials since its last finished one

    # ------------------------------------------------------------------ the loop
    def next_action(self) -> str:
        """'done' (the study has its trials), 'run' (ask for one) or 'wait' (others' running trials would
        complete the study; look again later, in case one of them fails or its worker dies)."""
        fail_stale_trials(self.study)
        counts = Counter(t.state for t in self.study.get_trials(deepcopy=False))
        finished = counts[TrialState.COMPLETE] + counts[TrialState.PRUNED]
        if finished >= self.settings.trials:
            return "done"
        if counts[TrialState.WAITING] or finished + counts[TrialState.RUNNING] < self.settings.trials:
            return "run"
        return "wait"

    def run_locally(self, nproc: int) -> None:
        """Trials trained by ``QG.launch`` on ``nproc`` processes of this machine, until the study is done."""
        while (action := self.next_action()) != "done":
            if action == "wait":
                time.sleep(WAIT_POLL_S)
                continue
            trial = self.ask()
            if trial is None:
                continue
            started = time.perf_counter()
            with self.running(trial):
                outcome = self._train_locally(trial, nproc)
            self.record(trial, outcome, time.perf_counter() - started)

    def _train_locally(self, trial, nproc: int) -> Outcome:
        try:
            config = self.trial_config(trial)
        except ConfigError as err:  # a sampled combination the schema refuses
            return Outcome.failed(err, user_error=True)
        try:
            result = launch(config, nproc, callbacks=[self.pruning(trial)])
        except (Preempted, KeyboardInterrupt):
            raise
        except UserError as err:
            return Outcome.failed(err, user_error=True)
        except TrainingFailed as err:
            logger.warning(f"trial {trial.number}: {err}\n{err.worker_traceback}")
            return Outcome.failed(err)
        except Exception as err:  # a trial on one process raised in this process: that trial fails
            logger.warning(f"trial {trial.number} failed", exc_info=True)
            return Outcome.failed(f"{type(err).__name__}: {err}")
        return outcome_of_run(result, self.settings.metric)

    # ------------------------------------------------------------------ one trial
    def ask(self):
        """A new trial (or an enqueued retry), or None when other workers claimed the study's last trials at
        the same moment: trial numbers order the claims, and a claim beyond ``tune.trials`` is given back
        (recorded FAIL, not run), so two workers never run the study past its trials."""
        with warnings.catch_warnings():  # heartbeats are meant for Study.optimize; this loop beats itself
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = self.study.ask()
        if self.settings.seed is not None:
            self.study.sampler = self.settings.sampler(trial.number)  # before the first suggest samples
        trials = self.study.get_trials(deepcopy=False)
        position, retries = claim_position(next(t for t in trials if t.number == trial.number)), retried_as(trials)
        ahead = [t for t in trials if claim_position(t) < position and (t.state in CLAIMED or awaiting_retry(t, retries))]
        if len(ahead) >= self.settings.trials:
            trial.set_user_attr("reason", f"not run: the study's {self.settings.trials} trials were claimed by "
                                          "other workers at the same moment")
            self.study.tell(trial, state=TrialState.FAIL)
            return None
        run_dir = self.settings.folder / TRIALS_DIR / trial_name(trial.number)
        for key, value in {"worker": self.worker, "run_dir": str(run_dir),
                           "reason": WORKER_LOST_REASONS[0]}.items():
            trial.set_user_attr(key, value)
        return trial

    def trial_config(self, trial) -> dict[str, Any]:
        """The trial's sampled values on the base config, validated like any config; its run directory
        under the study folder and, with W&B on, its run in the study's group."""
        placement: dict[str, Any] = {"training.path": str(self.settings.folder / TRIALS_DIR),
                                     "training.run_name": trial_name(trial.number), "training.resume": None}
        if self.base["logger"]["wandb"]:
            placement.update({"logger.wandb.group": self.settings.study,
                              "logger.wandb.name": f"{self.settings.study}-{trial_name(trial.number)}"})
        sampled = self.settings.space.suggest(trial)
        logger.info(f"trial {trial.number} ({self.worker}): {params_text(trial.params)}")
        return validate_config(apply_overrides(self.base, {**sampled, **placement}))

    def pruning(self, trial) -> PruneTrial:
        s = self.settings
        return PruneTrial(s.storage, s.study, trial._trial_id, s.metric, s.pruner_type, s.pruner_kwargs)

    @contextlib.contextmanager
    def running(self, trial) -> Iterator[None]:
        """Heartbeats while the trial runs; an interruption (SIGTERM, Ctrl-C) fails it, enqueues its retry at
        once and goes on up (a kill -9 leaves that to the next worker, through the stopped heartbeat)."""
        with heartbeat(self.study, trial._trial_id):
            try:
                yield
            except (Preempted, KeyboardInterrupt):
                trial.set_user_attr("reason", WORKER_LOST_REASONS[1])
                self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
                retry_now(self.study, trial)
                raise

    def record(self, trial, outcome: Outcome, seconds: float) -> None:
        """Tell the storage how the trial ended (PRUNED: with its last reported value)."""
        run_dir = self.settings.folder / TRIALS_DIR / trial_name(trial.number)
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            trial.set_user_attr("run_dir", str(run_dir) if run_dir.is_dir() else "")
            trial.set_user_attr("reason", outcome.reason)
            trial.set_user_attr("seconds", round(seconds, 1))
        told = self.study.tell(trial, outcome.value if outcome.state == TrialState.COMPLETE else None,
                               state=outcome.state, skip_if_finished=True)
        if told.state != outcome.state:  # another worker took it for dead (its heartbeat looked stale)
            logger.warning(f"trial {trial.number} ended {outcome.state.name} but was already {told.state.name} in the "
                           f"storage (another worker found its heartbeat stale); its run stays in {run_dir}")
        value = f" {self.settings.metric} {told.value:.4g}" if told.value is not None else ""
        logger.info(f"trial {trial.number} {outcome.state.name}{value} in {seconds:.1f} s: {outcome.reason}")
        self._count_failure(outcome)

    def _count_failure(self, outcome: Outcome) -> None:
        self.failures = self.failures + [outcome] if outcome.state == TrialState.FAIL else []
        if len(self.failures) < MAX_CONSECUTIVE_FAILURES:
            return
        message = (f"tune: the last {len(self.failures)} trials of this worker all failed, the last with: "
                   f"{self.failures[-1].reason}; fix the config or the search space (trials.csv lists them)")
        raise UserError(message) if all(f.user_error for f in self.failures) else StudyFailed(message)

    def finish(self) -> dict[str, Any]:
        """Write the study's files from the storage (every worker that ends does; the last one's are complete)."""
        return write_study_outputs(self.study, self.settings, self.base)

    def finish_after_error(self) -> None:
        """finish() on the way out of an error; its own failure is logged, not raised over the first one."""
        try:
            self.finish()
        except Exception as err:
            logger.warning(f"the study's files were not written: {one_line(err)}")


def params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={short_text(value) if not isinstance(value, float) else f'{value:.4g}'}"
                     for name, value in params.items())
