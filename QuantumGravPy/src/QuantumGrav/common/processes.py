"""This process and the worker processes it starts: its share of the cores, the context that starts
workers, the check that a script's top level does not start them (the main guard), and the lifeline that ends
them when this process is gone."""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.distributed as dist
import torch.multiprocessing as mp

from .errors import UserError

EXIT_CODE_LAUNCHER_GONE = 143  # what a shell reports for a process ended by SIGTERM
# What a worker process imports before it can train: seconds of CPU each (4 s on a slow 2-core machine). The
# package alone: it imports torch and PyG itself, with the garbage collector paused (QuantumGrav/__init__.py),
# which importing torch first would not be.
WORKER_PRELOAD = ("QuantumGrav",)


def get_world_size() -> int:
    """The number of processes in the job.

    Returns:
        The process group's size, 1 when no process group is initialised.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


def usable_cpu_count() -> int:
    """Cores this process may run on: the affinity mask, not the machine (SLURM and cgroups give fewer)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cores_per_process(local_processes: int | None = None) -> int:
    """This process's share of the cores it may use: split among the job's processes on this node
    (``local_processes``, else torchrun's LOCAL_WORLD_SIZE, else the world size); at least 1."""
    local = local_processes or int(os.environ.get("LOCAL_WORLD_SIZE", get_world_size()))
    return max(1, usable_cpu_count() // max(1, local))


def dataloader_workers(setting: int | str) -> int:
    """DataLoader workers of one process: ``setting`` (``training.num_workers``), or for ``auto`` this process's
    share of the cores less one, its own (so that the job's processes and their workers fit the cores)."""
    return max(0, cores_per_process() - 1) if setting == "auto" else int(setting)


def worker_context():
    """The multiprocessing context for the worker processes this library starts (``launch``, the doctor,
    the data generator's pool).

    Workers are forked from a server process that imported ``WORKER_PRELOAD`` once, so a job of N
    processes no longer pays N imports of torch and PyG. Forked from that clean server, and not from the
    caller (a Jupyter kernel that may hold CUDA, threads or a notebook's state), they are as safe as
    spawned ones, and like spawned ones they get the caller's ``sys.path`` and main module. What the server
    does not share with the caller is its environment at the time of a later call: ``launch`` hands its
    workers ``os.environ`` explicitly. Where fork does not exist (Windows), this is plain spawn.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_PRELOAD))  # only read when the server starts (once)
    return context


class Lifeline:
    """A pipe whose write end only the launching process holds; ``reader`` goes to every worker (pickled
    with the worker's arguments: multiprocessing hands the worker a copy of the descriptor). The read
    returns end-of-file the moment the launching process is gone, however it ended (``kill -9`` too)."""

    def __init__(self, context: Any):
        self.reader, self._writer = context.Pipe(duplex=False)

    def close(self) -> None:
        """The launcher is done with its workers (they have exited or were stopped)."""
        self.reader.close()
        self._writer.close()


def use_one_thread() -> None:
    """Run this process's torch and BLAS/OpenMP work on one thread, for the rest of its life: a worker of a pool
    is one core's worth of work. Left alone, each worker starts a thread per core of the machine, so a pool of W
    workers runs W x cores threads: 12 generation workers on a 16-core GPU node ran at a load average of up to
    141, and on a 2-core machine 2 workers generated at 0.83x the speed of one (1.59x with one thread each;
    docs/large_data.md)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)  # called, not entered: the limit stays for the worker's life


def start_pool_worker(reader: Any) -> None:
    """A process pool's initializer (``initargs=(lifeline.reader,)``): one thread per worker
    (``use_one_thread``), and an exit at once when the process that made the pool is gone (``exit_when_gone``)."""
    use_one_thread()
    exit_when_gone(reader)


def exit_when_gone(reader: Any) -> None:
    """A process pool's initializer (``initargs=(lifeline.reader,)``): this helper exits at once when the
    process that made the pool is gone. A ProcessPoolExecutor's workers would otherwise wait for their next
    task forever: each holds a write end of the pool's task queue, so it never reads end-of-file."""

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            reader.recv()
        os._exit(EXIT_CODE_LAUNCHER_GONE)

    threading.Thread(target=watch, name="QuantumGrav-lifeline", daemon=True).start()


def check_main_guard(caller: str, instead: str = "") -> None:
    """Refuse, before any worker starts, a call made by a script's top level outside the main guard.

    Workers started with forkserver or spawn import the script that is ``__main__`` again (as
    ``__mp_main__``); a ``QG.launch`` or a data set's generation that the script calls at its top level would
    then run again in every worker, which multiprocessing stops with a 40-line traceback (``BrokenProcessPool``
    from a pool). A notebook, ``python -c`` and an interactive session have no script to import again.
    ``caller``: the API the user called; ``instead``: the way to run it without workers, if any."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    line = _line_of_the_main_scripts_top_level(main)
    if path is None or line is None:
        return
    try:
        tree = ast.parse(Path(path).read_text(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return  # not a readable Python file (a zipapp, a frozen program): nothing to check
    if not _under_the_main_guard(tree, line):
        raise UserError(f"{caller} is called at the top level of {path} (line {line}) without the main guard: "
                        "its worker processes import this script again and each would run that line again. "
                        f'Put the call under `if __name__ == "__main__":` (as examples/train_ddp_standalone.py '
                        f"does){', or ' + instead if instead else ''}")


def _line_of_the_main_scripts_top_level(main: Any) -> int | None:
    """The line the ``__main__`` module's top-level code is running (the outermost such frame), if it is."""
    line, frame = None, sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is getattr(main, "__dict__", None):
            line = frame.f_lineno
        frame = frame.f_back
    return line


def _under_the_main_guard(tree: ast.Module, line: int) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            if any(statement.lineno <= line <= (statement.end_lineno or statement.lineno) for statement in node.body):
                return True
    return False


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def map_in_workers(function: Callable[..., Any], calls: Sequence[tuple], workers: int, *, caller: str,
                   instead: str = "") -> list[Any]:
    """``[function(*call) for call in calls]``, in a pool of up to ``workers`` processes when there is more than
    one call: started from ``worker_context``, and ended by a lifeline when this process is gone (``kill -9``
    too), so no helper outlives a killed job. ``function`` must be importable (a module's function).
    ``caller``, ``instead``: the API the user called and how it runs without workers, for ``check_main_guard``,
    which refuses a pool started from a script's top level before it starts."""
    if workers <= 1 or len(calls) <= 1:
        return [function(*call) for call in calls]
    check_main_guard(caller, instead)
    context = worker_context()
    lifeline = Lifeline(context)
    try:
        with ProcessPoolExecutor(min(workers, len(calls)), mp_context=context, initializer=start_pool_worker,
                                 initargs=(lifeline.reader,)) as pool:
            return list(pool.map(function, *zip(*calls)))
    finally:
        lifeline.close()
