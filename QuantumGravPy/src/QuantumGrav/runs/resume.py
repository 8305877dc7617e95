"""Which run a job continues: the same run after a restart, a requeue or a rerun, with no extra flag.

A run's identity, the first that applies:

1. ``training.resume: RUN_DIR`` (``--resume``): that run.
2. ``training.run_name``: the run of that name under ``training.path``, continued from its last
   checkpoint when it has one (a rerun of the same command continues it).
3. torchrun's job (``TORCHELASTIC_RUN_ID``, set by ``--rdzv-id``; the SLURM script passes the job id,
   so a requeued job finds its run; or, without a run id, a token kept in torchrun's store, which
   every restart of the job shares): the run directory that the job's first attempt created, found
   through ``training.path/.jobs/<token>``.

Anything else (a plain new job) starts a new run directory, as always.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .checkpoint_files import has_checkpoint
from ..distributed.process_group import torchrun_store
from ..distributed.runtime import Runtime
from ..config.sections.training import CheckpointSection
from ..common.files import atomic_write_text
from .artifacts import create_run_dir

JOBS_DIR = ".jobs"


def job_token() -> str | None:
    """A name for this job that every restart of it shares; None outside torchrun."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return f"torchrun-{run_id}"
    store = torchrun_store()
    if store is None:
        return None
    # The first attempt's rank 0 draws the token; later attempts read it back from the store.
    return "torchrun-" + store.compare_set("QuantumGrav/job_token", "", secrets.token_hex(8)).decode()


def run_to_continue(checkpoint: CheckpointSection, token: str | None) -> Path | None:
    """The run directory this job continues, or None for a new run (called on rank 0)."""
    if checkpoint.resume:
        return Path(checkpoint.resume).expanduser().resolve()
    parent = Path(checkpoint.path).expanduser().resolve()
    if checkpoint.run_name:
        named = parent / checkpoint.run_name
        return named if has_checkpoint(named) else None
    if token:
        pointer = parent / JOBS_DIR / token
        if pointer.is_file():
            earlier = Path(pointer.read_text().strip())
            return earlier if has_checkpoint(earlier) else None
    return None


def remember_run(checkpoint: CheckpointSection, token: str | None, run_dir: Path) -> None:
    """Rank 0, for a new run of a job with a token: where a restart of this job will find it."""
    if token and not checkpoint.run_name:
        atomic_write_text(Path(checkpoint.path).expanduser().resolve() / JOBS_DIR / token, f"{run_dir}\n")


def forget_run(checkpoint: CheckpointSection, token: str | None) -> None:
    """Rank 0, once the run has finished: a later job with the same token starts afresh."""
    if token:
        (Path(checkpoint.path).expanduser().resolve() / JOBS_DIR / token).unlink(missing_ok=True)


def find_run_to_continue(checkpoint: CheckpointSection, runtime: Runtime, token: str | None) -> Path | None:
    """Rank 0 decides which run this job continues (see the module docstring); one broadcast gives every
    rank the same answer."""
    found = run_to_continue(checkpoint, token) if runtime.is_main else None
    found = runtime.broadcast_from_main(str(found) if found else None)
    return Path(found) if found else None


def open_run_dir(checkpoint: CheckpointSection, runtime: Runtime, token: str | None, continued: Path | None) -> Path:
    """The run directory: the one continued, or a new one that rank 0 creates (and remembers for a restart
    of this job); every rank gets its path."""
    if continued:
        return continued
    path = None
    if runtime.is_main:
        path = create_run_dir(checkpoint.path, checkpoint.run_name)
        remember_run(checkpoint, token, path)
    return Path(runtime.broadcast_from_main(str(path) if path else None))
