"""A loss that holds every rank of a job at one training step, so that a test can stop the job there
(``scontrol requeue``, ``scancel``, ``kill -9`` of a node's torchrun) and know where it stopped: inside an
epoch, with every rank's process at hand (``criterion: !pyobject pausing_loss.cross_entropy``).

The job's environment sets (without them it is plain cross-entropy)
  QG_TEST_PAUSE_DIR   the folder of the markers
  QG_TEST_PAUSE_AT    the training step (loss call with gradients) of each process that pauses

Each process of each attempt of a job (SLURM's requeues, torchrun's restarts) pauses once, at that step of
its own, after writing ``<dir>/<attempt>.rank<r>`` (its rank, node and pid). It goes on when SIGTERM
arrives (the job is being stopped: the ranks learn of it at the step after this one, checkpoint and stop;
the process then writes ``<dir>/<attempt>.rank<r>.terminated``) or when ``<dir>/<attempt>.go`` exists;
never later than MAX_PAUSE_S.
"""

import os
import signal
import time
from pathlib import Path

import torch

MAX_PAUSE_S = 120.0
_steps = {"n": 0}


def attempt() -> str:
    """This attempt of the job: the SLURM job, its requeue count and torchrun's restart count."""
    return ".".join(os.environ.get(name, "0") for name in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT",
                                                             "TORCHELASTIC_RESTART_COUNT"))


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled():  # training; validation and test run without gradients
        _steps["n"] += 1
        if str(_steps["n"]) == os.environ.get("QG_TEST_PAUSE_AT"):
            _pause(Path(os.environ["QG_TEST_PAUSE_DIR"]))
    return torch.nn.functional.cross_entropy(logits, target)


def _pause(folder: Path) -> None:
    rank, node = os.environ.get("RANK", "0"), os.environ.get("SLURMD_NODENAME", "")
    terminated = []
    library_handler = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        terminated.append(signum)
        if callable(library_handler):
            library_handler(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        marker, partial = folder / f"{attempt()}.rank{rank}", folder / f".{attempt()}.rank{rank}.tmp"
        partial.write_text(f"{rank} {node} {os.getpid()}\n")
        os.replace(partial, marker)  # a reader never sees half a line
        deadline = time.monotonic() + MAX_PAUSE_S
        go = folder / f"{attempt()}.go"
        while not terminated and not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if terminated:
            marker.with_name(marker.name + ".terminated").touch()
    finally:
        signal.signal(signal.SIGTERM, library_handler)
