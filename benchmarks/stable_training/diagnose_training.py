#!/usr/bin/env python3
"""What slows the default job down and what makes its validation loss jump: measured epoch by epoch.

    OMP_NUM_THREADS=1 python benchmarks/stable_training/diagnose_training.py --epochs 20 --data-seed 1234 \
        --set validation.recompute_batch_norm=false --json out.json
    OMP_NUM_THREADS=1 python benchmarks/stable_training/diagnose_training.py --no-flush ...   # as without the library's flush

Trains configs/train.yaml (with ``--set`` overrides) and, after every epoch, records:

- throughput (graphs/s of the epoch's training);
- denormal floats (nonzero, below float32's smallest normal 1.18e-38) in the parameters, their gradients of
  the epoch's last step, AdamW's two moments, and the activations of one validation pass: every module's
  output and the attention weights of every ``SparseTransformerConv`` (its softmax);
- the validation loss three ways: with batch norm's running statistics (the loop's with
  ``--set validation.recompute_batch_norm=false``, the default before it existed), with the statistics
  recomputed over the whole training set (``recalibrated``: the loop's default; the weights are the same,
  only the statistics differ), and with batch norm normalising each validation batch by its own statistics
  (``batch_stats``). If only the first jumps, the weights are fine and the running statistics jump.

``benchmarks/stable_training/results_diagnose_training.json`` holds the two runs of the commands above (``--json`` of each),
side by side on a 2-core machine. A measurement, not a test: one run of the default job takes minutes.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

import QuantumGrav as QG
from QuantumGrav.models import sparse_attention
from QuantumGrav.training.batch_norm import batch_norms, recompute_batch_norm_statistics

TINY = torch.finfo(torch.float32).tiny


def denormals(tensor: torch.Tensor | None) -> int:
    if tensor is None or not tensor.is_floating_point():
        return 0
    return int(((tensor != 0) & (tensor.abs() < TINY)).sum())


class ActivationCounter:
    """Counts denormals in every module output and in the attention weights while ``active``."""

    def __init__(self, model: torch.nn.Module):
        self.active, self.counts = False, {"module_outputs": 0, "attention_weights": 0, "values": 0}
        for module in model.modules():
            module.register_forward_hook(self._hook)
        original = sparse_attention.softmax

        def counting_softmax(*args, **kwargs):
            alpha = original(*args, **kwargs)
            if self.active:
                self.counts["attention_weights"] += denormals(alpha)
            return alpha
        sparse_attention.softmax = counting_softmax

    def _hook(self, module, inputs, output) -> None:
        if self.active and isinstance(output, torch.Tensor):
            self.counts["module_outputs"] += denormals(output)
            self.counts["values"] += output.numel()

    def measure(self, run) -> dict[str, int]:
        self.counts = dict.fromkeys(self.counts, 0)
        self.active = True
        try:
            run()
        finally:
            self.active = False
        return dict(self.counts)


@torch.no_grad()
def recalibrated_val_loss(trainer, train_loader, val_loader) -> float:
    """The validation loss with every batch norm's statistics recomputed over the training set as the loop
    does with ``validation.recompute_batch_norm`` (the weights unchanged); the model is restored afterwards."""
    saved = copy.deepcopy(trainer.core_model.state_dict())
    recompute_batch_norm_statistics(trainer.core_model, train_loader, trainer.device, trainer.runtime,
                                    lambda: trainer.optimization.autocast(trainer.device.type))
    loss = trainer.evaluate(val_loader)["loss"]
    trainer.core_model.load_state_dict(saved)
    return loss


@torch.no_grad()
def batch_stats_val_loss(trainer, val_loader) -> float:
    """The validation loss with batch norm normalising each validation batch by its own statistics."""
    model, saved = trainer.core_model, copy.deepcopy(trainer.core_model.state_dict())
    norms = batch_norms(model)
    original_train = [bn.train for bn in norms]
    for bn in norms:
        bn.train = lambda mode=True, bn=bn: torch.nn.Module.train(bn, True)  # stays in training mode
    try:
        loss = trainer.evaluate(val_loader)["loss"]
    finally:
        for bn, train in zip(norms, original_train):
            bn.train = train
            bn.training = False
    model.load_state_dict(saved)  # the batch statistics' updates of the running ones are undone
    return loss


class Diagnose(QG.Callback):
    """Hooks receive the run's state (``callbacks.state.RunState``: model, optimizer), not the trainer; the
    extra validation passes need the trainer's ``evaluate``, so it is handed in once the trainer exists."""

    def __init__(self, rows: list[dict]):
        self.rows = rows  # trainer, loaders and counter: set once the trainer has built them

    def on_epoch_end(self, state, record):
        trainer, model, optimizer = self.trainer, state.model, state.optimizer
        params = list(model.parameters())
        state = [optimizer.state.get(p, {}) for p in params]
        row = {"epoch": record["epoch"], "graphs_per_s": record["graphs_per_s"], "val_loss": record["val_loss"],
               "val_accuracy": record["val_accuracy"], "train_loss": record["train_loss"], "lr": record["lr"],
               "denormal_parameters": sum(denormals(p) for p in params),
               "denormal_gradients": sum(denormals(p.grad) for p in params),
               "denormal_exp_avg": sum(denormals(s.get("exp_avg")) for s in state),
               "denormal_exp_avg_sq": sum(denormals(s.get("exp_avg_sq")) for s in state),
               "parameters": sum(p.numel() for p in params)}
        started = time.perf_counter()
        activations = self.counter.measure(lambda: trainer.evaluate(self.val_loader))
        row["val_pass_s"] = time.perf_counter() - started
        row.update({f"denormal_{k}" if k != "values" else "activation_values": v for k, v in activations.items()})
        row["val_loss_recalibrated"] = recalibrated_val_loss(trainer, self.train_loader, self.val_loader)
        row["val_loss_batch_stats"] = batch_stats_val_loss(trainer, self.val_loader)
        self.rows.append(row)
        print(json.dumps(row), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/train.yaml")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--data-seed", type=int, default=1234)
    parser.add_argument("--no-flush", action="store_true", help="keep denormal floats (training.flush_denormals)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--workdir", default="/tmp/qg_diagnose")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    overrides = {"training.num_epochs": args.epochs, "training.path": f"{args.workdir}/runs",
                 "training.progress_bar": False, "training.figures": False, "testing.baselines": False,
                 "early_stopping.enabled": False, "data.seed": args.data_seed, "data.root": f"{args.workdir}/data",
                 "training.flush_denormals": not args.no_flush}
    config = QG.apply_overrides(QG.load_config(args.config, overrides), args.set)
    rows: list[dict] = []
    diagnose = Diagnose(rows)
    trainer = QG.Trainer(config, callbacks=[diagnose])
    loaders = trainer.prepare_dataloaders()
    diagnose.trainer, (diagnose.train_loader, diagnose.val_loader) = trainer, loaders[:2]
    diagnose.counter = ActivationCounter(trainer.core_model)
    trainer.run_training(*loaders[:2])
    trainer.close()
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
        import study_results  # written whole or not at all

        study_results.write_json(args.json, {"command": " ".join(sys.argv), "threads": torch.get_num_threads(),
                                             "flush_denormals": not args.no_flush, "rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
