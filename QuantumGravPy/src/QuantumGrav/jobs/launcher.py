"""Start a training job: in this process, in N spawned processes, or as one torchrun worker.

``launch`` starts N worker processes from anywhere, a Jupyter kernel included: the workers run library
code only, so nothing defined in the notebook needs to be pickled or imported. If one worker fails, the
others are stopped at once and the error is raised here with its rank.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue as queue_module
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..callbacks.base import Callback
from ..config.schema import ResolvedConfig, resolve_config
from ..config.yaml_io import find_unimportable
from ..common.processes import check_main_guard, cores_per_process, worker_context
from ..distributed.environment import (check_devices, choose_backend, configured_device_type, find_free_port,
                                       launched_by_torchrun)
from ..distributed.lifeline import Lifeline, stop_when_the_agent_dies, stop_when_the_launcher_dies
from ..common.errors import Preempted, UserError
from ..common.logging_utils import chosen_console_level, get_logger
from .entry import remove_unfinished_run, run_job, run_process

logger = get_logger("launch")
DEAD_WORKER_GRACE_S = 2.0
EXIT_GRACE_S = 30.0  # how long a worker that reported its result may take to exit


class TrainingFailed(RuntimeError):
    """A worker process of ``launch`` raised or died; raised in the launching process.

    Args:
        rank: the rank that failed first.
        message: what it raised (``"ValueError: ..."``), or how it exited.
        worker_traceback: the worker's traceback as text (empty when it died without reporting).

    Attributes:
        rank: the rank that failed first.
        worker_traceback: the worker's traceback as text.
    """

    def __init__(self, rank: int, message: str, worker_traceback: str):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.worker_traceback = rank, worker_traceback


def check_spawnable(config: dict, callbacks: Sequence[Callback] = ()) -> None:
    """Spawned processes import every class and function of the config (and the classes of the callbacks
    handed to ``launch``) by name, and get the callbacks pickled: fail now, not there."""
    try:
        pickle.dumps(list(callbacks))
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        raise UserError(f"callbacks: QG.launch hands each rank a pickled copy of its callbacks, and one cannot be "
                        f"pickled ({err}); keep names and numbers in a callback and open files, connections or "
                        "models in its on_fit_start") from None
    unimportable = find_unimportable(config) + find_unimportable({"callbacks": [type(c) for c in callbacks]})
    if unimportable:
        listing = ", ".join(f"{key} = {path}" for key, path in unimportable)
        name = unimportable[0][1].rsplit(".", 1)[-1]
        raise UserError(f"{listing}: spawned worker processes cannot import objects defined in a notebook or "
                        "script (__main__) or inside a function. Move it into a .py module next to the notebook "
                        f"(e.g. my_module.py) and refer to it as !pyobject my_module.{name}, or use nproc=1")


def check_job(config: dict | str | Path, nproc: int | None = None) -> str:
    """What can be known before a job's processes start, found by one process: the config is valid and this
    machine can run ``nproc`` processes of it (default ``parallel.world_size``). Raises the ``UserError``
    the workers would raise; returns a line saying what would run.

    A batch script calls it (``python -m QuantumGrav train --check``) before it starts torchrun on every
    node: torchrun restarts its workers after any failure, a bad config included, and exits with 1."""
    sections = resolve_config(config).sections
    nproc = sections.parallel.world_size if nproc is None else nproc
    check_devices(sections.loop.device, nproc)
    device = configured_device_type(sections.loop.device)
    backend = choose_backend(sections.parallel.backend, sections.loop.device)
    return f"{nproc} process(es) on {device} ({backend}), {sections.loop.num_epochs} epochs"


class Training:
    """What every rank of a training job runs (``run_process``); picklable, so that spawned workers receive it.

    Rank 0 tells the launching process where the run lives (``run_dirs``), so that the launcher can remove it if
    the job fails on bad input after rank 0 was already stopped."""

    def __init__(self, callbacks: Sequence[Callback] = ()):
        self.callbacks = list(callbacks)

    def __call__(self, config, rank: int, *, report, run_dirs, console_level) -> None:
        # A SimpleQueue writes at once: a Queue's feeder thread might not have sent it yet when the parent stops rank 0.
        report_run_dir = (lambda trainer: run_dirs.put(str(trainer.run_dir))) if rank == 0 else None
        run_process(config, rank, report=report, on_start=report_run_dir, callbacks=self.callbacks,
                    console_level=console_level)


def _worker(rank: int, world_size: int, config: dict, port: int, results, run_dirs,
            console_level: str | int | None, environment: dict[str, str], job, lifeline) -> None:
    """Entry point of a worker process (module level, so that the worker can import it by name)."""
    # First of all: from here on, this worker stops whenever the launching process ends (lifeline.py).
    stop_when_the_launcher_dies(lifeline)
    # The launching process's environment now, not the fork server's from its start (worker_context):
    # a notebook that sets CUDA_VISIBLE_DEVICES or WANDB_MODE before its second launch gets it applied.
    os.environ.clear()
    os.environ.update(environment)
    # The environment torchrun would give this worker: from here on both launchers share one code path
    # (and a MASTER_PORT inherited from the parent can never override the port picked for this job).
    os.environ.update(LOCAL_RANK=str(rank), RANK=str(rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR=str(config.sections.parallel.master_addr), MASTER_PORT=str(port))
    # N processes each using every core thrash the CPU (torchrun sets OMP_NUM_THREADS=1 for this reason).
    torch.set_num_threads(cores_per_process(world_size))
    try:
        job(config, rank, report=lambda result, err: results.put(_report(rank, result, err)), run_dirs=run_dirs,
            console_level=console_level)
    except Preempted:  # every rank stopped at the same step, after rank 0's checkpoint
        pass
    except BaseException:  # reported to the parent, with its rank
        raise SystemExit(1)


def _report(rank: int, result: dict[str, Any] | None, err: BaseException | None) -> tuple:
    """What a worker tells the launching process about how its job ended."""
    if err is None:
        return "ok", rank, result if rank == 0 else None
    if isinstance(err, Preempted):
        return "preempted", rank, str(err)
    return ("error", rank, f"{type(err).__name__}: {err}", "".join(traceback.format_exception(err)),
            isinstance(err, UserError))


def launch(config: dict | str | Path, nproc: int | None = None, *, port: int | None = None,
           callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Run the job on ``nproc`` processes of this machine and return rank 0's result.

    Works from a terminal, a script and a Jupyter kernel; SIGTERM and a kernel interrupt reach every
    worker, and no worker is left running when it returns or raises.

    Args:
        config: a config path, dict or resolved config; validated once, here.
        nproc: the number of processes; None: ``parallel.world_size``. ``1`` runs in this process.
        port: the rendezvous port; None: ``parallel.master_port``, else a free one.
        callbacks: ``QuantumGrav.Callback`` instances added to every rank's trainer; with ``nproc > 1`` each
            rank gets a pickled copy, so their classes must be importable by name (defined in a module, not
            in the notebook).

    Returns:
        Rank 0's result, as ``run_job`` returns it.

    Raises:
        ConfigError: an invalid config.
        UserError: ``nproc`` below 1, something the workers could not import, more processes than GPUs, or
            bad data (then the unfinished run directory is removed).
        TrainingFailed: a worker raised or died; names its rank and carries its traceback.

    Example:
        >>> import QuantumGrav as QG
        >>> result = QG.launch("configs/train_ddp.yaml", nproc=2)  # doctest: +SKIP
        >>> result["test"]["accuracy"]  # doctest: +SKIP
    """
    config = resolve_config(config)  # validated once here; the workers receive it validated
    nproc = config.sections.parallel.world_size if nproc is None else nproc
    if nproc < 1:
        raise UserError(f"nproc: expected an integer >= 1, got {nproc}")
    if nproc == 1:
        return run_job(config, callbacks=callbacks)
    check_main_guard("QG.launch")
    return launch_processes(config, nproc, Training(callbacks), port=port, callbacks=callbacks)


def launch_processes(config: ResolvedConfig, nproc: int, job: Callable[..., Any], *, port: int | None = None,
                     callbacks: Sequence[Callback] = ()) -> Any:
    """Run ``job`` on ``nproc`` worker processes of this machine and return what rank 0 reported.

    Every worker joins the job's process group through ``config`` (its ``parallel`` section, ``training.device``)
    and calls ``job(config, rank, report=..., run_dirs=..., console_level=...)``, a picklable object whose rank
    calls ``report(result, error)`` when its work ends (``entry.run_in_group`` does): ``Training``, or an
    applied run's evaluation. What the workers import by name (the config's objects, ``callbacks``' classes) is
    checked first (``check_spawnable``); the caller checks that it is importable itself (``check_main_guard``).
    ``config`` goes to them as resolved here: each worker's trainer records the process group's world size in it
    (``TrainerDDP``), the one place a job's config gets it, whoever started the processes.

    Raises:
        UserError: more processes than GPUs, or bad input found by a worker (then an unfinished run directory
            that rank 0 reported in ``run_dirs`` is removed).
        TrainingFailed: a worker raised or died; names its rank and carries its traceback.
    """
    check_spawnable(config, callbacks)
    check_devices(config.sections.loop.device, nproc)
    port = port or config.sections.parallel.master_port or find_free_port()
    context = worker_context()
    results, run_dirs, lifeline = context.Queue(), context.SimpleQueue(), Lifeline(context)
    arguments = (nproc, config, port, results, run_dirs, chosen_console_level(), dict(os.environ), job,
                 lifeline.reader)
    processes = [context.Process(target=_worker, args=(rank, *arguments), name=f"rank{rank}") for rank in range(nproc)]
    try:
        for process in processes:
            process.start()
        with _sigterm_passed_to(processes):
            return _supervise(processes, results)
    except UserError:
        _stop(processes)
        if not run_dirs.empty():  # empty: rank 0 failed before it created the run directory
            remove_unfinished_run(run_dirs.get())
        raise
    finally:  # on success, on a worker's failure and on KeyboardInterrupt (a kernel interrupt)
        _stop(processes)
        lifeline.close()  # after the workers are gone: closed earlier, it would tell them to stop


def _supervise(processes: list, results) -> dict[str, Any]:
    """Wait for every rank; on the first failure raise it (the caller stops the rest)."""
    finished: dict[int, Any] = {}
    first_seen_dead: float | None = None
    while len(finished) < len(processes):
        try:
            status, rank, *payload = results.get(timeout=0.2)
        except queue_module.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0) and int(p.name[4:]) not in finished]
            if dead:
                # A rank that failed normally reported first; give its message a moment to arrive
                # before concluding it was killed without one (e.g. by the out-of-memory killer).
                first_seen_dead = first_seen_dead or time.monotonic()
                if time.monotonic() - first_seen_dead > DEAD_WORKER_GRACE_S:
                    rank = int(dead[0].name[4:])
                    raise TrainingFailed(rank, f"process exited with code {dead[0].exitcode} without reporting", "")
            continue
        if status == "error":
            message, worker_traceback, is_user_error = payload
            if is_user_error:
                raise UserError(f"rank {rank}: {message.split(': ', 1)[-1]}")
            raise TrainingFailed(rank, message, worker_traceback)
        finished[rank] = (status, payload[0])
    _wait_for_exit(processes, EXIT_GRACE_S)
    status, result = finished[0]
    if status == "preempted":  # the ranks stopped together: report it once every rank has
        raise Preempted(result)
    return result


@contextlib.contextmanager
def _sigterm_passed_to(processes: list):
    """SIGTERM to the launching process (a scheduler's notice, ``kill``) goes on to every worker, which
    checkpoints and stops; without this the workers would train on with no one to report to."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def pass_on(signum, frame) -> None:
        logger.warning("SIGTERM: passing it to every rank (they checkpoint, then stop)")
        for process in processes:
            if process.is_alive():
                process.terminate()

    previous = signal.signal(signal.SIGTERM, pass_on)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_for_exit(processes: list, grace_s: float) -> None:
    """Every rank reported success: the job succeeded. A worker stuck in its teardown (a hang in
    a library's destructor, say) is stopped after ``grace_s`` instead of being waited for forever."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    stuck = [p for p in processes if p.is_alive()]
    if stuck:
        ranks = ", ".join(p.name[4:] for p in stuck)
        logger.warning(f"rank {ranks} reported success but had not exited {grace_s:.0f} s later; stopping it "
                       "(the results are complete)")
        _stop(stuck, grace_s=2.0)


def _stop(processes: list, grace_s: float = 5.0) -> None:
    processes = [p for p in processes if p.pid is not None]  # a start that failed leaves the rest unstarted
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(grace_s)
        if process.is_alive():
            process.kill()
            process.join()


def run_from_entry_point(config: dict | str | Path, nproc: int | None = None) -> dict[str, Any] | None:
    """What scripts and the CLI call: one torchrun worker if torchrun started us, else ``launch``."""
    if not launched_by_torchrun():
        return launch(config, nproc)  # resolves the config, once
    # torchrun started one copy of us per process and exported RANK, WORLD_SIZE, ...
    stop_when_the_agent_dies()
    return run_process(resolve_config(config), int(os.environ["RANK"]))
