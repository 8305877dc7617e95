"""What one process of a job runs, however it was started (``QG.launch``, torchrun, a study's rank).

``run_job`` builds, trains, tests and tears down a trainer in this process. ``run_process`` wraps it in
the rest of a process's life (``run_in_group``, which any job's ranks share): its logging, joining the job's
process group, its failure logged, and leaving the group.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.distributed as dist

from ..callbacks.base import Callback
from ..distributed.environment import choose_backend
from ..distributed.process_group import cleanup_ddp, initialize_ddp
from ..common.errors import Preempted, UserError
from ..common.logging_utils import get_logger, setup_logging
from ..runs.checkpoint_files import has_checkpoint
from ..training.ddp import TrainerDDP
from ..training.trainer import Trainer

logger = get_logger("launch")

Report = Callable[[dict[str, Any] | None, BaseException | None], None]


def run_job(config: dict | str | Path, on_start: Callable[[Any], None] | None = None,
            callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Train and test in this process: a single process, or one rank of a DDP job (when a process group is
    initialised, a ``TrainerDDP`` is used).

    Args:
        config: a config path, dict or resolved config (``load_config``).
        on_start: called as ``on_start(trainer)`` once the trainer (and its run directory) exists.
        callbacks: ``QuantumGrav.Callback`` instances added to the trainer's own.

    Returns:
        ``{"rank", "run_dir", "history", "test", "summary"}``: ``test`` holds the test metrics on rank 0 and
        None on the other ranks.

    Raises:
        ConfigError: an invalid config.
        UserError: bad data or environment; a run directory without a checkpoint is removed.
    """
    trainer = (TrainerDDP(rank=dist.get_rank(), config=config, callbacks=callbacks) if dist.is_initialized()
               else Trainer(config, callbacks=callbacks))
    if on_start:
        on_start(trainer)
    try:
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        test = trainer.run_test(test_loader)  # rank 0 evaluates; the others get None
        return {"rank": trainer.runtime.rank, "run_dir": str(trainer.run_dir), "history": trainer.history,
                "test": test, "summary": dict(trainer.summary)}
    except BaseException as err:
        if dist.is_initialized():
            _log_failure(err)  # now, while this rank's log file is open (close() ends it)
        if isinstance(err, UserError) and trainer.runtime.is_main:
            remove_unfinished_run(trainer.run_dir)
        raise
    finally:
        trainer.close()


def run_process(config: dict[str, Any], rank: int, *, report: Report | None = None,
                on_start: Callable[[Any], None] | None = None, callbacks: Sequence[Callback] = (),
                console_level: str | int | None = None, store: dist.Store | None = None) -> dict[str, Any]:
    """One rank of a training job from start to end (``run_in_group`` of ``run_job``); returns ``run_job``'s
    result and raises what it raised.

    Args:
        config: a resolved config.
        rank: this process's rank.
        report: as ``run_in_group`` takes it.
        on_start, callbacks: as ``run_job`` takes them.
        console_level: the console level of rank 0's log (None: ``setup_logging``'s default).
        store: the key-value store the ranks meet through (None: ``initialize_ddp``'s).
    """
    return run_in_group(config, rank, lambda: run_job(config, on_start=on_start, callbacks=callbacks),
                        report=report, console_level=console_level, store=store)


def run_in_group(config: dict[str, Any], rank: int, work: Callable[[], Any], *, report: Report | None = None,
                 console_level: str | int | None = None, store: dist.Store | None = None) -> Any:
    """The life of one rank of any job (training, an applied run's evaluation): its logging, joining the process
    group (torchrun's environment, or the one its launcher set; backend and timeout from ``config``), ``work()``,
    and leaving the group; returns what ``work`` returned and raises what it raised.

    ``report`` is called as ``report(result, None)`` or ``report(None, error)`` when the work ends on this rank,
    before it leaves the group: leaving may hang (a library's teardown), and a launcher stops a rank stuck there
    only once every rank has reported."""
    setup_logging(rank, level=console_level)
    try:
        parallel = config.sections.parallel
        initialize_ddp(backend=choose_backend(parallel.backend, config.sections.loop.device),
                       timeout_s=parallel.timeout_s, store=store)
        result = work()
    except BaseException as err:
        _log_failure(err)  # a launcher, or torchrun, then stops the other ranks
        if report:
            report(None, err)
        raise
    else:
        if report:
            report(result, None)
        return result
    finally:
        cleanup_ddp()


def remove_unfinished_run(run_dir: str | Path | None) -> None:
    """A run that failed on bad input before its first checkpoint leaves nothing on disk
    (a resumed run has a checkpoint, so it is never removed)."""
    if run_dir and not has_checkpoint(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)


def _log_failure(err: BaseException) -> None:
    """One line with the rank prefix, on the console of every rank (ERROR passes their filter);
    once per exception, however many layers it passes on its way out."""
    if getattr(err, "_quantumgrav_logged", False):
        return
    if isinstance(err, Preempted):  # not a failure: the run is checkpointed and continues when restarted
        logger.warning(str(err))
    else:  # the full traceback for failures that are not bad input: it lands in this rank's log file too
        logger.error(f"this rank failed: {type(err).__name__}: {err}", exc_info=not isinstance(err, UserError))
    with contextlib.suppress(AttributeError):  # an exception type with __slots__ is logged again: harmless
        err._quantumgrav_logged = True  # type: ignore[attr-defined]
