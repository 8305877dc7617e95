#!/usr/bin/env python3
"""The batch norm pass before each validation (``validation.recompute_batch_norm``): its share of an epoch, and
what reading fewer training sets (``validation.recompute_batch_norm_sets``) saves and does to the validation
curve.

    OMP_NUM_THREADS=1 python benchmarks/stable_training/bench_batch_norm_pass.py --epochs 10 --sets 128 256 512
    OMP_NUM_THREADS=1 python benchmarks/stable_training/bench_batch_norm_pass.py --epochs 10 --sets 32 64 \
        --set data.n_min=1024 --set data.n_max=1024 --set data.num_samples=150 --json out.json

Trains the job of ``--config`` in one process (early stopping off) with the whole-training-set pass (the loop's
own). After every epoch, on the same weights, batch norm's statistics are set again from the statistics the
epoch's training left, and validated, each way: from the first ``--sets`` training sets of the epoch's shuffled
order (what ``recompute_batch_norm_sets`` does), and with the running averages of the last batches (the pass
off, which ``every k epochs`` would give on k - 1 epochs of k). The weights, and so the training, are the same
for every way (training normalises each batch by its own statistics), so the validation curves differ only by
the statistics: each way's validation loss is compared with the whole pass's, epoch by epoch. Each pass is
timed in CPU seconds (the machine this was written on is shared) beside the epoch's training and validation.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# benchmarks/training_loop/bench_training.py: the default job's comparison config, loader and model
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training_loop"))
import bench_training as bench  # noqa: E402

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.training import batch_norm  # noqa: E402
from QuantumGrav.training import trainer as trainer_module  # noqa: E402


def _norm_buffers(model: torch.nn.Module) -> list[dict]:
    return [copy.deepcopy(n.state_dict()) for n in batch_norm.batch_norms(model)]


def _load_norm_buffers(model: torch.nn.Module, buffers: list[dict]) -> None:
    for norm, state in zip(batch_norm.batch_norms(model), buffers):
        norm.load_state_dict(state)


class PassTimer:
    """Wraps the loop's batch norm pass: the statistics training left (before it) and its CPU seconds."""

    def __init__(self):
        self.original = trainer_module.recompute_batch_norm_statistics
        self.before: list[dict] = []
        self.cpu_s = 0.0
        trainer_module.recompute_batch_norm_statistics = self

    def __call__(self, model, *args, **kwargs):
        self.before = _norm_buffers(model)
        self.started = started = time.process_time()
        try:
            return self.original(model, *args, **kwargs)
        finally:
            self.cpu_s = time.process_time() - started


class EveryWay(QG.Callback):
    def __init__(self, sets: list[int], timer: PassTimer):
        self.sets, self.timer, self.rows = sets, timer, []
        self.mark = 0.0  # CPU time when the epoch's training began (about: the previous epoch's hooks end)

    def on_fit_start(self, state):
        self.mark = time.process_time()

    def setup(self, trainer) -> None:
        self.trainer, prepare = trainer, trainer.prepare_dataloaders

        def keeping_loaders():
            self.train_loader, self.val_loader, test = prepare()
            return self.train_loader, self.val_loader, test

        trainer.prepare_dataloaders = keeping_loaders

    def _validate(self) -> tuple[dict, float]:
        started = time.process_time()
        val = self.trainer.evaluate(self.val_loader)
        return {"val_loss": val["loss"], "val_accuracy": val["accuracy"]}, time.process_time() - started

    def on_epoch_end(self, state, record):
        model, trainer = self.trainer.core_model, self.trainer
        whole = _norm_buffers(model)
        full, val_cpu_s = self._validate()
        ways = {"whole": {**full, "pass_cpu_s": self.timer.cpu_s}}
        for sets in [*self.sets, None]:
            _load_norm_buffers(model, self.timer.before)
            started = time.process_time()
            if sets is not None:
                batch_norm.recompute_batch_norm_statistics(
                    model, self.train_loader, trainer.device, trainer.runtime,
                    lambda: trainer.optimization.autocast(trainer.device.type), sets=sets)
            pass_cpu_s = time.process_time() - started
            ways[str(sets) if sets else "running"] = {**self._validate()[0], "pass_cpu_s": pass_cpu_s}
        _load_norm_buffers(model, whole)  # as the loop left it
        row = {"epoch": record["epoch"], "train_cpu_s": self.timer.started - self.mark,
               "epoch_wall_s": record["epoch_time_s"], "val_cpu_s": val_cpu_s, "ways": ways}
        self.rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        self.mark = time.process_time()


def run(config: dict, sets: list[int]) -> list[dict]:
    from QuantumGrav.jobs.entry import run_job

    timer = PassTimer()
    every_way = EveryWay(sets, timer)
    run_job(config, on_start=every_way.setup, callbacks=[every_way])
    return every_way.rows


def best_epoch(losses: list[float], window: int = 3) -> int:
    """The epoch early stopping would keep (the default job's rule): the last of the ``window`` consecutive
    epochs with the lowest mean validation loss."""
    means = [statistics.mean(losses[i + 1 - window:i + 1]) for i in range(window - 1, len(losses))]
    return window - 1 + min(range(len(means)), key=means.__getitem__)


def print_table(rows: list[dict], train_sets: int) -> dict:
    """Per way: the pass's CPU s per epoch, its share of the epoch, its validation loss against the whole
    pass's (the largest and median relative difference after the first epoch, and the accuracy's), and the
    epoch early stopping would keep; beside them, how much the whole pass's loss moves from epoch to epoch."""
    ways = list(rows[0]["ways"])
    later = rows[1:] or rows
    epoch_cpu = statistics.median(r["train_cpu_s"] + r["val_cpu_s"] + r["ways"]["whole"]["pass_cpu_s"] for r in later)
    print(f"\nThe batch norm pass per epoch ({train_sets} training sets; medians over epochs 1-{rows[-1]['epoch']}; "
          f"an epoch: training, the whole pass and validation, {epoch_cpu:.1f} CPU s):")
    print("| statistics from | pass CPU s per epoch | share of the epoch | largest val-loss difference from the whole "
          "pass | median difference | largest val-accuracy difference | best epoch (window 3) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    table = {}
    for way in ways:
        cpu = statistics.median(r["ways"][way]["pass_cpu_s"] for r in later)
        loss = [abs(r["ways"][way]["val_loss"] / r["ways"]["whole"]["val_loss"] - 1) for r in later]
        accuracy = [abs(r["ways"][way]["val_accuracy"] - r["ways"]["whole"]["val_accuracy"]) for r in later]
        name = {"whole": "the whole training set", "running": "running averages (no pass)"}.get(way, f"{way} sets")
        best = best_epoch([r["ways"][way]["val_loss"] for r in rows])
        table[way] = {"pass_cpu_s": cpu, "share": cpu / epoch_cpu, "max_val_loss_rel_diff": max(loss),
                      "median_val_loss_rel_diff": statistics.median(loss), "max_val_accuracy_diff": max(accuracy),
                      "best_epoch": best}
        print(f"| {name} | {cpu:.2f} | {100 * cpu / epoch_cpu:.1f}% | {100 * max(loss):.1f}% | "
              f"{100 * statistics.median(loss):.1f}% | {max(accuracy):.3f} | {best} |")
    whole = [r["ways"]["whole"]["val_loss"] for r in later]
    moves = statistics.median(abs(b / a - 1) for a, b in zip(whole, whole[1:]))
    print(f"\nThe whole pass's validation loss moves by {100 * moves:.1f}% from one epoch to the next (median).")
    return {**table, "whole_epoch_to_epoch_median_change": moves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--sets", type=int, nargs="+", default=[128, 256, 512],
                        help="training sets the shorter passes read")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--json", default="benchmarks/stable_training/results_batch_norm_pass.json")
    parser.add_argument("--table-only", action="store_true", help="print the table of the rows stored in --json")
    args = parser.parse_args()
    if args.table_only:
        stored = json.loads(Path(args.json).read_text())
        stored["table"] = print_table(stored["rows"], stored["training_sets"])
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
        import study_results  # written whole or not at all

        study_results.write_json(args.json, stored, indent=1)
        return
    QG.setup_logging(level="WARNING")
    torch.set_num_threads(1)
    print(f"CPU: {bench.cpu_model()}; load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as workdir:
        config = QG.apply_overrides(bench.comparison_config(args.epochs, None, workdir, args.config),
                                    [*args.set, "validation.recompute_batch_norm=true"])
        QG.CausalSetDataset.from_config(config["data"])  # generated once, outside the timing
        rows = run(config, args.sets)
    train_sets = round(config["data"]["num_samples"] * config["data"]["split"][0])
    table = print_table(rows, train_sets)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
    import study_results  # written whole or not at all

    study_results.write_json(args.json, {
        "command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "machine": {"cpu": bench.cpu_model(), "cpus": os.cpu_count(), "load_average_after": os.getloadavg(),
                    "platform": platform.platform(), "torch": torch.__version__},
        "training_sets": train_sets, "data": {k: config["data"][k] for k in ("n_min", "n_max", "num_samples")},
        "table": table, "rows": rows}, indent=1)
    print(f"\nstored in {args.json}")


if __name__ == "__main__":
    main()
