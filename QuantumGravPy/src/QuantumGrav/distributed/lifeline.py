"""Workers die with the process that started them, however it ended.

``QG.launch``'s workers are forked by multiprocessing's fork server, not by the process that called
``launch`` (a script, a Jupyter kernel, a study's worker): the kernel's parent-death signal, which
torchrun's workers use (``stop_when_the_agent_dies``), would watch the fork server, and it
does not exist on macOS. So the launching process holds the only write end of a pipe and every worker
watches the read end in a thread: the read returns end-of-file the moment the launching process is
gone, whether it returned, crashed, or was killed with ``kill -9`` or by the out-of-memory killer.
The fork server and multiprocessing's resource tracker stop by themselves once the last process
holding their pipes (the workers) has exited; DataLoader workers stop when their rank does. The data
generator's pool workers (also forked by the fork server) hold nothing worth saving: they exit at once
when the process that made the pool is gone (``exit_when_gone``, the pool's initializer).

A worker whose launcher is gone stops as on a preemption, so that the run stays continuable: it sends
itself SIGTERM, every rank votes to stop at the next optimizer step, rank 0 checkpoints and releases
the run lock, and the same command started again continues from that checkpoint. Outside the training
loop SIGTERM ends the process at once (the last checkpoint is what a rerun continues from). A worker
that cannot stop in time (a collective waiting for a rank that is gone, a hung file system) is ended
``LAUNCHER_GONE_GRACE_S`` later, and its lock is then taken over by the rerun as a dead process's lock.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any

from ..common.logging_utils import get_logger
from ..common.processes import EXIT_CODE_LAUNCHER_GONE, Lifeline  # noqa: F401  (Lifeline: for the launcher)

logger = get_logger("launch")
LAUNCHER_GONE_GRACE_S = 30.0  # from the launcher's death to a worker's hard exit, at the latest

def stop_when_the_launcher_dies(reader: Any, grace_s: float = LAUNCHER_GONE_GRACE_S) -> threading.Thread:
    """In a worker: watch ``reader`` (a ``Lifeline``'s) in a daemon thread; when the launcher is gone,
    stop as on a preemption, and exit for certain ``grace_s`` later."""
    watcher = threading.Thread(target=_watch, args=(reader, grace_s), name="QuantumGrav-lifeline", daemon=True)
    watcher.start()
    return watcher


def _watch(reader: Any, grace_s: float) -> None:
    try:
        reader.recv()  # nothing is ever sent: this returns only by end-of-file (or an error of the pipe)
    except (EOFError, OSError):
        pass
    logger.warning("the process that started this job (QG.launch) is gone: stopping as on a preemption "
                   "(checkpoint at the next step); the same command continues the run")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    # Still running: stuck where SIGTERM is not acted on. Nothing may outlive the launcher holding a GPU
    # or a port, so end now, without the interpreter's teardown (which could wait on the same thing).
    logger.warning(f"still running {grace_s:.0f} s after its launcher ended: exiting now")
    os._exit(EXIT_CODE_LAUNCHER_GONE)



def stop_when_the_agent_dies() -> None:
    """A torchrun worker gets SIGTERM when its torchrun (the agent, its parent) dies, and stops as on a
    preemption: every rank checkpoints at the next step, or fails within parallel.timeout_s where a peer
    is gone too. torchrun passes SIGTERM on to its workers when it is told to stop, but killed (``kill -9``,
    the out-of-memory killer, a node's job step killed) it leaves them running: holding their GPUs, waiting
    in a collective for ranks that are gone, and, under SLURM's proctrack/linuxproc, outliving the job.
    Linux only (prctl); the request is the parent's thread's, and torchrun starts its workers from its
    main thread."""
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:  # the agent died before the request was made: nothing would send it now
        os.kill(os.getpid(), signal.SIGTERM)
