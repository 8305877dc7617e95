"""Hyperparameter studies: ``QG.tune(config)`` and ``python -m QuantumGrav tune``.

A study is a campaign of trials, each an ordinary run directory under the study folder, trained by the
same Trainer as any run. Optuna (an optional dependency: ``pip install 'QuantumGrav[tune]'``) keeps the
study: its samplers, pruners, storages, heartbeats and figures are what research groups already know,
and a study can be watched live with optuna-dashboard; a hand-written search would have none of it.

Every worker (a tuner process, or every rank of a torchrun job, see ``tune_ddp``) loops: fail the trials
whose worker died and enqueue their retries, then stop when the study has ``tune.trials`` finished
(COMPLETE or PRUNED) trials, wait while the trials of other workers would complete it, or ask for a
trial, train it and record its outcome. Pruning is a callback vote (``PruneTrial``): rank 0 reports each
epoch's validation metric to the trial and votes to stop when the pruner says so; the loop gathers the
votes of every rank, so every rank stops at the same epoch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import optuna
from optuna.trial import TrialState

from ..distributed.environment import launched_by_torchrun
from ..common.errors import UserError
from ..common.processes import check_main_guard
from ..jobs.launcher import check_job, check_spawnable
from ..common.logging_utils import setup_logging
from .config import read_study_config
from .storage import open_study
from .trials import StudyWorker
from .tune_ddp import run_distributed_worker


def tune(config: Any, trials: int | None = None, nproc: int | None = None,
         overrides: list[str] | dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Run (or continue, or join) the study of ``config``: a training config with a ``tune:`` section, as a
    path, a dict or a list of them. ``trials`` overrides ``tune.trials``; ``nproc`` the processes per trial
    (default ``parallel.world_size``; under torchrun, the job's). Returns the study's summary (rank 0)."""
    settings, base = read_study_config(config, overrides, trials)
    setup_logging()
    with _quiet_optuna():
        if launched_by_torchrun():
            return run_distributed_worker(settings, base)
        nproc = base["parallel"]["world_size"] if nproc is None else nproc
        if nproc < 1:
            raise UserError(f"nproc: expected an integer >= 1, got {nproc}")
        if nproc > 1:  # every trial would fail on it: say it once, now
            check_main_guard("QG.tune")
            check_spawnable({**base, "tune": {"space": [d.choices for d in settings.space.dimensions]}})
        worker = StudyWorker(settings, base, open_study(settings))
        try:
            worker.run_locally(nproc)
        except BaseException:  # failed, preempted or interrupted: trials.csv says what the study has so far
            worker.finish_after_error()
            raise
        return worker.finish()


def check_study(config: Any, trials: int | None = None, nproc: int | None = None,
                overrides: list[str] | dict[str, Any] | None = None) -> str:
    """What can be known before a study's workers start, found by one process: the study config is valid,
    its storage opens and holds this study (or a study of the same metric and space), and this machine can
    run ``nproc`` processes per trial. A batch script calls it (``tune --check``) before torchrun, so that a
    config error ends the job once with exit code 2. Returns a line saying what would run."""
    settings, base = read_study_config(config, overrides, trials)
    with _quiet_optuna():
        study = open_study(settings)
    finished = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials(deepcopy=False))
    return (f"study '{settings.study}' in {settings.storage}: {finished} of {settings.trials} trials finished; "
            f"each trial: {check_job(base, nproc)}")


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's INFO lines (study created, trial finished) repeat what the tuner logs in its own words."""
    previous = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(previous)


__all__ = ["check_study", "tune"]
