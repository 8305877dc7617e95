#!/usr/bin/env python3
"""Train QuantumGrav's default GNN with DDP, every step written out: a script to read, run and adapt.

In QuantumGravPy/ or at the repository root, with the environment active (source .venv/bin/activate):

    torchrun --nproc_per_node=2 examples/train_ddp_standalone.py      # torchrun starts 2 copies of this script
    python examples/train_ddp_standalone.py --nproc 2                # this script starts 2 processes (mp.spawn)
    torchrun --nproc_per_node=3 QuantumGravPy/examples/train_ddp_standalone.py --set training.num_epochs=5

Without --config it trains the repository's configs/train_ddp.yaml, wherever it is started from (its runs go
to the repository's runs/, its data cache to data/, where `make train` keeps them). Options: --help.
CPU processes use gloo, GPUs NCCL (one process per GPU: CUDA_VISIBLE_DEVICES=3,4,5 torchrun --nproc_per_node=3).
QUANTUMGRAV_SMOKE_TEST=1 in front runs it in seconds on a tiny data set.

Each process runs `train_one_rank` below: join the process group, build the library's TrainerDDP from the
config, train (every rank, in lockstep), test (rank 0), leave the group. Exit codes: 0 done; 2 bad input
(one `error:` line); 143 stopped by SIGTERM after a checkpoint (a requeue continues the run); 1 a failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import QuantumGrav as QG
from QuantumGrav.common.errors import Preempted  # every rank checkpointed on SIGTERM and stopped
from QuantumGrav.distributed.lifeline import stop_when_the_agent_dies
from QuantumGrav.jobs.entry import remove_unfinished_run  # bad input leaves no half-made run directory
from QuantumGrav.runs.records import summarise_run  # the one-screen summary `make train` prints
from QuantumGrav.train_ddp import TrainerDDP, cleanup_ddp, initialize_ddp

# The repository this script belongs to (QuantumGravPy/examples/ -> two folders up), not the working directory.
REPOSITORY = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPOSITORY / "configs" / "train_ddp.yaml"
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_PREEMPTED = 2, 1, 143
log = logging.getLogger("train_ddp_standalone")


class BadArguments(QG.UserError):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        raise BadArguments(f"{self.prog}: {message} (--help lists the options)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    parser.add_argument("--config", help=f"YAML config (default: {DEFAULT_CONFIG.relative_to(REPOSITORY)} of "
                                         "this repository, whatever the working directory)")
    parser.add_argument("--merge", action="append", default=[], metavar="YAML",
                        help="lay a partial config over it, e.g. configs/logger/wandb_ddp.yaml (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set training.num_epochs=3 (repeatable)")
    parser.add_argument("--nproc", type=int, help="processes to start without torchrun (default: "
                                                  "parallel.world_size); ignored under torchrun")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)  # torch.distributed.launch
    args = parser.parse_args(argv)
    if args.nproc is not None and args.nproc < 1:
        parser.error(f"--nproc: expected an integer >= 1, got {args.nproc}")
    return args


def load_job_config(args: argparse.Namespace):
    """The validated config (QG.ConfigError names every bad key). The default config's relative folders are
    the repository's, so that the job is the same from QuantumGravPy/ and from the root."""
    overrides = list(args.overrides)
    if args.config is None:
        overrides = [f"training.path={json.dumps(str(REPOSITORY / 'runs'))}",
                     f"data.root={json.dumps(str(REPOSITORY / 'data'))}", *overrides]  # yours come last and win
    if args.resume:
        overrides.append(f"training.resume={json.dumps(args.resume)}")
    return QG.load_config([args.config or DEFAULT_CONFIG, *args.merge], overrides)


def setup_logging(rank: int) -> None:
    """Every line says which rank wrote it. The library's own lines (set-up, one line per epoch, the test)
    come from rank 0, the other ranks print their warnings only; this script's lines come from every rank."""
    QG.setup_logging(rank)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[RANK {rank}] %(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


class SayWhereThisRankStopped(QG.Callback):
    """Runs on every rank when training ends: the stop decision, taken from the votes of every rank in one
    collective, reached each of them, so every rank names the same epoch and reason."""

    def on_fit_end(self, state, decision) -> None:
        log.info(f"training stopped after epoch {state.epoch}: {decision.reason}")


def train_one_rank(rank: int, world_size: int | None, config, master_port: int | None = None) -> int:
    """One process of the job, from joining the process group to leaving it; returns its exit code.

    Under torchrun, `world_size` and `master_port` are None: the group's rank, size and address come from the
    environment torchrun set (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""
    setup_logging(rank)
    parallel, device = config["parallel"], config["training"]["device"]
    trainer = None
    try:
        # 1. The process group. NCCL moves CUDA tensors and gloo CPU ones; the backend follows the device the
        # config trains on. The timeout bounds every collective: a rank that waits for one that never comes
        # (a crashed peer) fails after parallel.timeout_s instead of PyTorch's 30 minutes.
        backend = parallel["backend"] or ("nccl" if device != "cpu" and torch.cuda.is_available() else "gloo")
        if master_port is None:
            initialize_ddp(backend=backend, timeout_s=parallel["timeout_s"])
        else:
            initialize_ddp(rank, world_size, master_addr=parallel["master_addr"], master_port=master_port,
                           backend=backend, timeout_s=parallel["timeout_s"])
        log.info(f"joined the process group: rank {rank} of {dist.get_world_size()} ({backend})")

        # 2. The trainer: on GPUs each process drives cuda:LOCAL_RANK and the model is wrapped in
        # DistributedDataParallel, which gives every rank rank 0's initial weights and averages the gradients
        # in every backward(). Rank 0 generates the data cache while the others wait, then every rank reads it.
        # A run with a checkpoint to continue (--resume, training.run_name, a torchrun restart) resumes here.
        trainer = TrainerDDP(rank=rank, config=config, callbacks=[SayWhereThisRankStopped()])

        # 3. The loaders. Training: a DistributedSampler gives each rank its 1/world_size of the sets, padded
        # so that every rank takes the same number of steps, reshuffled every epoch (set_epoch). Validation:
        # each rank its own disjoint shard, no padding (validation.mode: sharded).
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()

        # 4. Training, on EVERY rank: a rank that skipped it would leave the others waiting in their first
        # gradient all-reduce. Each epoch every rank validates its shard and the sums and counts (loss sum,
        # correct predictions, sets) are all-reduced, then divided: exact metrics of the whole validation split,
        # never a mean of the ranks' means. Rank 0 logs them, writes metrics.csv and the checkpoints
        # (checkpoints/last.pt, and best.pt at the best epoch); early stopping votes on every rank on the same
        # record, and one all-gather of the votes gives every rank the same decision (SayWhereThisRankStopped).
        trainer.run_training(train_loader, val_loader)

        # 5. The test: rank 0 alone, on the best epoch's weights; it uses no collective, so the other ranks may
        # leave the group meanwhile. None on the other ranks.
        test = trainer.run_test(test_loader)
        if rank == 0:
            best = Path(trainer.run_dir) / "checkpoints" / "best.pt"
            log.info(f"tested the weights of epoch {trainer.summary.get('best_epoch')} ({best.name} in the run "
                     "directory: torch.load(path, weights_only=True)['model'] loads them without DDP)")
            print(summarise_run({"summary": dict(trainer.summary), "test": test}), flush=True)
        return 0
    except Preempted as err:  # SIGTERM (a scheduler's notice): every rank checkpointed at the same step
        log.warning(f"stopped: {err}")
        return EXIT_PREEMPTED
    except QG.UserError as err:  # bad config, data or environment: one line, no traceback
        log.error(f"error: {err}")
        if rank == 0 and trainer is not None:
            remove_unfinished_run(trainer.run_dir)  # unless it has a checkpoint: a resumed run is kept
        return EXIT_BAD_INPUT
    except Exception as err:  # a bug: its traceback, tagged with the rank; the launcher stops the other ranks
        log.error(f"this rank failed: {type(err).__name__}: {err}", exc_info=True)
        return EXIT_FAILED
    finally:
        # 6. Teardown, also after an error: the trainer first (its W&B run, its log file), then the group.
        # cleanup_ddp() frees the DDP wrapper before it destroys the group (in the other order gloo can hang
        # at exit) and uses no barrier (a dead peer would make it wait forever).
        if trainer is not None:
            trainer.close()
        cleanup_ddp()


def spawned_rank(rank: int, world_size: int, config, master_port: int) -> None:
    """What each process started by mp.spawn runs: it ends with train_one_rank's exit code."""
    # Each process its share of the cores: N processes each using every core would slow all of them down.
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
    sys.exit(train_one_rank(rank, world_size, config, master_port))


def spawn(config, nproc: int) -> int:
    """Without torchrun: start `nproc` processes on this machine, wait for them, return the job's exit code."""
    if nproc > 1 and config["training"]["device"] != "cpu" and torch.cuda.is_available() \
            and nproc > torch.cuda.device_count():
        raise QG.UserError(f"--nproc {nproc}: only {torch.cuda.device_count()} CUDA GPU(s) are visible; one "
                           "process per GPU (check CUDA_VISIBLE_DEVICES)")
    port = config["parallel"]["master_port"] or QG.find_free_port()  # the rendezvous on this machine
    if nproc == 1:  # a job of one process: this one
        return train_one_rank(0, 1, config, port)
    # mp.spawn starts fresh interpreters that import this file (hence the main guard at the bottom) and call
    # spawned_rank(rank, ...) in each; every process gets the validated config.
    job = mp.spawn(spawned_rank, args=(nproc, config, port), nprocs=nproc, join=False)
    # SIGTERM to this process (a scheduler, `kill`) goes on to every rank: each checkpoints and stops (143).
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in job.processes if p.is_alive()])
    try:
        while not job.join():  # returns once all have exited with 0; raises at the first that did not
            pass
    except mp.ProcessExitedException as err:  # that rank said why; the others were stopped
        return err.exit_code if err.exit_code > 0 else EXIT_FAILED
    return 0


def main(argv: list[str] | None = None) -> int:
    torchrun = all(name in os.environ for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))
    rank = int(os.environ.get("RANK", 0))
    try:
        args = parse_args(argv)
        config = load_job_config(args)  # every process checks it before any joins the group
        if torchrun:  # torchrun started this script once per process, each with its RANK
            # This worker stops (as on SIGTERM: a checkpoint) when its torchrun dies, e.g. killed with its node.
            stop_when_the_agent_dies()
            return train_one_rank(rank, None, config)
        return spawn(config, args.nproc or config["parallel"]["world_size"])
    except QG.UserError as err:
        if rank == 0:  # the same on every rank: rank 0 says it
            print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
