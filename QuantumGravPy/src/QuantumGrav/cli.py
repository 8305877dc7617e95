"""Command line: ``python -m QuantumGrav train|evaluate|tune|generate|doctor``.

Bad input (config, data, command line, environment) prints one ``error:`` line and
exits with code 2, without a traceback. A job stopped by SIGTERM after checkpointing (preemption)
exits with 143 (128 + SIGTERM); started again, it continues its run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common.errors import Preempted, UserError
from .jobs.launcher import TrainingFailed

EXIT_BAD_INPUT = 2
EXIT_PREEMPTED = 143  # what a shell reports for a process ended by SIGTERM: schedulers treat it so


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is 2 as well
        self.print_usage(sys.stderr)
        raise UserError(f"{self.prog}: {message}")


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def _port(text: str) -> int:
    value = _int_at_least(1)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port between 1 and 65535, got {value}")
    return value


def _add_evaluate(commands) -> argparse.ArgumentParser:
    """The evaluate command: a trained run applied to new data (jobs.applied_run)."""
    evaluate = commands.add_parser("evaluate", help="apply a trained run's best checkpoint to new data: print its "
                                   "metrics per class and per kind of causal set; write every set's prediction (a "
                                   "node run's: every element's; scores only where the data records no truth)")
    # --run-dir under torchrun: its parser takes --run for a prefix of its own --run-path.
    evaluate.add_argument("--run", "--run-dir", dest="run", required=True, metavar="RUN_DIR",
                          help="a run directory that train wrote (--run-dir under torchrun)")
    evaluate.add_argument("--data", required=True, nargs="+", metavar="PATH",
                          help="a YAML config (its data: section, built as training builds it), or QuantumGrav.jl "
                               "stores and folders of stores")
    evaluate.add_argument("--split", choices=("all", "test"), default="all",
                          help="every set of the data, or the test part of the split training would make of it "
                               "(default: %(default)s)")
    evaluate.add_argument("--out", metavar="CSV", default=None,
                          help="the predictions CSV, metrics.json beside it (default: "
                               "RUN_DIR/evaluations/<data name>/predictions.csv)")
    evaluate.add_argument("--nproc", type=_int_at_least(1), default=1,
                          help="processes, each predicting a shard of the data (default: %(default)s); ignored "
                               "under torchrun")
    evaluate.add_argument("--out-of-range", choices=("flag", "refuse"), default="flag",
                          help="sets outside the range of N (and of the head's invariants) the run was trained on: "
                               "flag them (a CSV column, a count and a note) or refuse to evaluate (default: "
                               "%(default)s)")
    evaluate.add_argument("--store-option", dest="store_options", action="append", default=[], metavar="KEY=VALUE",
                          help="how QuantumGrav.jl stores are read (repeatable): max_elements=N, "
                               "not_partial_orders=refuse|close|skip, cache=true|false, cache_dir=PATH, "
                               "cset_type_encoding=produce_data|encode_csettype (default: as the run read its own "
                               "stores)")
    return evaluate


def build_parser(train_prog: str | None = None) -> argparse.ArgumentParser:
    """``train_prog``: the name ``train``'s usage and errors give, for a script that is that command."""
    parser = _Parser(prog="python -m QuantumGrav", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = commands.add_parser("train", prog=train_prog, help="generate data (cached), train, test; print a summary")
    train.add_argument("--config", default="configs/train.yaml", help="YAML config (default: %(default)s)")
    train.add_argument("--merge", action="append", default=[], metavar="YAML",
                       help="lay a partial config over --config, e.g. configs/logger/wandb_ddp.yaml (repeatable)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set training.num_epochs=3 (repeatable)")
    train.add_argument("--nproc", type=_int_at_least(1), default=None,
                       help="processes on this machine (default: parallel.world_size); ignored under torchrun")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint")
    train.add_argument("--check", action="store_true",
                       help="check the config, and this machine's GPUs for --nproc processes, then exit without "
                            "training (0: ready; 2: the error). A batch script runs it once before it starts the "
                            "job's processes (configs/slurm_ddp.sbatch)")
    # torch.distributed.launch (legacy) passes --local-rank / --local_rank to every worker.
    train.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, help=argparse.SUPPRESS)
    evaluate = _add_evaluate(commands)
    tune = commands.add_parser("tune", help="run, continue or join a hyperparameter study (Optuna); print its summary")
    tune.add_argument("--config", default="configs/tune.yaml", help="training config with a tune: section "
                                                                    "(default: %(default)s)")
    tune.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value, tune.* included, e.g. --set tune.study=lr_scan (repeatable)")
    tune.add_argument("--trials", type=_int_at_least(1), default=None,
                      help="finished trials (COMPLETE or PRUNED) the study ends with (default: tune.trials)")
    tune.add_argument("--check", action="store_true",
                      help="check the study config, open its storage and check this machine's GPUs for --nproc "
                           "processes per trial, then exit without training (batch scripts run it before torchrun)")
    tune.add_argument("--nproc", type=_int_at_least(1), default=None,
                      help="processes per trial (default: parallel.world_size); ignored under torchrun")
    generate = commands.add_parser("generate", help="generate the data cache of a config's data section in "
                                     "parallel (for QuantumGrav.jl stores: their feature cache, this task's "
                                     "share); print where it is, how many sets and sets/s")
    generate.add_argument("--config", default="configs/train.yaml", help="YAML config (default: %(default)s)")
    generate.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="override a config value, e.g. --set data.num_samples=100000 (repeatable)")
    generate.add_argument("--workers", type=_int_at_least(1), default=None,
                          help="generation processes (default: data.workers, else the cores this process may use)")
    doctor = commands.add_parser("doctor", help="check Python, torch, PyG, CUDA/NCCL/gloo, ports, wandb")
    doctor.add_argument("--nproc", type=_int_at_least(1), default=2, help="processes you plan to run (default: 2)")
    doctor.add_argument("--num-workers", type=_int_at_least(0), default=0, help="DataLoader workers per process")
    doctor.add_argument("--port", type=_port, default=None, help="rendezvous port to check (default: a free one)")
    doctor.add_argument("--config", default=None, help="also run this training config's memory preflight: its "
                                                        "largest batch once, forward and backward, against the limit")
    doctor.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a value of --config (repeatable)")
    for command in (train, evaluate, tune, generate, doctor):
        command.set_defaults(command_parser=command)
    return parser


def _train(args: argparse.Namespace) -> int:
    import json
    import os

    from .config.schema import load_config
    from .jobs.launcher import check_job, run_from_entry_point
    from .common.logging_utils import rank_zero_only
    from .runs.records import summarise_run

    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    # The folder name as a quoted YAML string: 'runs/exp #3' or '2024' must not be read as YAML.
    overrides = list(args.overrides) + ([f"training.resume={json.dumps(args.resume)}"] if args.resume else [])
    config = load_config([args.config, *args.merge], overrides)
    if args.check:
        print(f"{args.config}: ready: {check_job(config, args.nproc)}")
        return 0
    result = run_from_entry_point(config, args.nproc)
    if result is not None and result.get("test") is not None:
        rank_zero_only(print)(summarise_run(result))  # under torchrun every rank returns here
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .evaluation.predictions import describe_evaluation
    from .jobs.applied_run import evaluate_from_entry_point

    result = evaluate_from_entry_point(args.run, args.data, split=args.split, out=args.out, nproc=args.nproc,
                                       store_options=_key_values(args.store_options, "--store-option"),
                                       out_of_range=args.out_of_range)
    if result is not None:  # rank 0 (under torchrun every rank returns here)
        print(describe_evaluation(result))
    return 0


def _key_values(pairs: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` texts as a dict, each value read as YAML (numbers, booleans, strings)."""
    import yaml

    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {pair!r}: expected KEY=VALUE")
        found[key] = yaml.safe_load(value)
    return found


def _tune(args: argparse.Namespace) -> int:
    from .studies.config import require_optuna

    require_optuna()
    # Lazy: these import optuna, an optional dependency that `train` must not need.
    from .studies.report import summarise_study
    from .studies.trials import StudyFailed
    from .studies.tuner import check_study, tune

    if args.check:
        print(f"{args.config}: ready: {check_study(args.config, args.trials, args.nproc, args.overrides)}")
        return 0
    try:
        summary = tune(args.config, trials=args.trials, nproc=args.nproc, overrides=args.overrides)
    except StudyFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if summary is not None:  # rank 0 (under torchrun every rank returns here)
        print(summarise_study(summary))
    return 0


def _generate(args: argparse.Namespace) -> int:
    import time

    from .config.schema import load_config
    from .config.yaml_io import pyobject_path
    from .data.dataset import CausalSetDataset, default_workers
    from .data.sources import naming_the_cache_folder

    data_cfg = load_config(args.config, args.overrides)["data"]
    if data_cfg["type"] is not None and pyobject_path(data_cfg["type"]) in STORE_DATASETS:
        return _cache_stores(data_cfg, args.workers or data_cfg["kwargs"].get("workers") or default_workers())
    if data_cfg["type"] is not None:
        raise UserError(f"data.type: generate makes the built-in generator's cache, but {args.config} names a "
                        f"dataset class of its own; use a config without data.type (e.g. configs/train.yaml)")
    workers = args.workers or data_cfg["workers"] or default_workers()
    start = time.perf_counter()
    with naming_the_cache_folder(data_cfg):  # disk: only the index is read back, whatever the data's size
        dataset = CausalSetDataset.from_config({**data_cfg, "workers": workers, "storage": "disk"})
    seconds = time.perf_counter() - start
    print(f"{dataset.processed_dir}: {len(dataset)} causal sets")
    if dataset.generated_sets:
        print(f"generated {dataset.generated_sets} sets in {seconds:.1f} s with {workers} processes: "
              f"{dataset.generated_sets / seconds:,.0f} sets/s")
    else:
        print("the cache was complete already: nothing generated")
    return 0


# The datasets read from QuantumGrav.jl's stores; KindsDataset writes them first (generated here).
STORE_DATASETS = ("QuantumGrav.data.zarr_store.QuantumGravJLDataset", "QuantumGrav.data.kinds.dataset.KindsDataset")


def _cache_stores(data_cfg: dict, workers: int) -> int:
    """``generate`` for QuantumGrav.jl stores: write the stores of KindsDataset if missing, then compute and cache
    the graphs of this task's share of the items (``data.stores.cache.build_cache_share``: task RANK of WORLD_SIZE, or
    SLURM_PROCID of SLURM_NTASKS)."""
    from .data.stores.cache import build_cache_share

    print(build_cache_share(data_cfg["kwargs"], workers, data_cfg["type"]))
    return 0


def main(argv: list[str] | None = None, train_prog: str | None = None) -> int:
    try:
        args, unknown = build_parser(train_prog).parse_known_args(argv)
        if unknown:  # argparse would name the top-level program; the command's parser names what the user ran
            args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if args.command == "doctor":
            from .config.schema import load_config
            from .doctor import run_doctor

            config = load_config(args.config, args.overrides) if args.config else None
            return run_doctor(nproc=args.nproc, num_workers=args.num_workers, port=args.port, config=config)
        if args.command == "generate":
            return _generate(args)
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "tune":
            return _tune(args)
        return _train(args)
    except TrainingFailed as err:  # a worker's own traceback, then one line naming the rank
        print(err.worker_traceback, file=sys.stderr)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Preempted as err:
        print(f"stopped: {err}", file=sys.stderr)
        return EXIT_PREEMPTED
    except UserError as err:
        from .common.processes import get_world_size
        from .distributed.environment import get_rank

        rank = f"[RANK {get_rank()}] " if get_world_size() > 1 else ""  # under torchrun: which worker
        print(f"{rank}error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
