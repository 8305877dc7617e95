#!/usr/bin/env python3
"""Where an inserted block sits, at the size users run: the node task (configs/inserted_block.yaml) on merged and
merged_ambiguous sets of N ~ 1,024 whose blocks have exactly m elements, per kind and per block size, over data
seeds, with both rivals of the node task beside the GNN on the same test elements.

    python benchmarks/located_blocks/study_located_blocks.py --seeds 1 2 3 --json benchmarks/located_blocks/results_located_blocks.json \\
        --runs /tmp/located_blocks/runs --data /tmp/located_blocks/data

Each data seed (``data.kwargs.seed``) draws its own sets; the training seed is the data seed plus 1000. A run is
trained by the CLI in its own process (``python -m QuantumGrav train``), up to ``--epochs`` epochs under the
config's early stopping (on validation F1), or reused where ``--runs`` already holds its folder with a
summary.json (the same settings; the study records how each run ended). Then, on the run's test split:

* the GNN: the run applied by ``QG.load_run(...).evaluate(..., split="test")`` (its predictions CSV: one row per
  element, thresholded at the task's threshold);
* ``rule`` and ``trees``: the node task's rivals (``QuantumGrav.analyses.node_rival``: the best anomaly rule and
  gradient-boosted trees on every element score, raw and as its anomaly in its set), fitted on the run's
  training split.

Every marker is scored by the task's own totals (``node_rival.marked_totals``): element accuracy, precision,
recall, F1 and the mean IoU of the marked elements with the block, in groups of sets (all, per kind, per block size,
per kind and block size); the pooled rows add the totals of every seed before dividing. Results are written after
every seed; a seed already in ``--json`` is not run again. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))

import study_results  # noqa: E402  (benchmarks/study_results.py: the --json results file)

MARKERS = ("gnn", "rule", "trees")
INSERTED = "inserted_block"  # the task's positive class name, as the predictions CSV writes it


def settings(args: argparse.Namespace, seed: int) -> list[str]:
    return [f"data.kwargs.path={args.data}", f"data.kwargs.num_per_kind={args.per_kind}",
            f"data.kwargs.n_min={args.n[0]}", f"data.kwargs.n_max={args.n[1]}",
            f"data.kwargs.block_sizes={list(args.block_sizes)}", f"data.kwargs.seed={seed}",
            f"training.seed={seed + 1000}", f"training.num_epochs={args.epochs}", f"training.path={args.runs}",
            f"training.run_name=node_seed{seed}", "training.num_workers=0", "training.progress_bar=false"]


def trained_run(args: argparse.Namespace, seed: int) -> tuple[Path, float | None]:
    """The run of ``seed``: reused where its folder holds a summary.json, else trained now (and its wall time)."""
    run_dir = Path(args.runs) / f"node_seed{seed}"
    if (run_dir / "summary.json").exists():
        return run_dir, None
    command = [sys.executable, "-m", "QuantumGrav", "train", "--config", "configs/inserted_block.yaml"]
    for setting in settings(args, seed):
        command += ["--set", setting]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "QUANTUMGRAV_SMOKE_TEST": "0",
           "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"seed {seed} failed:\n{finished.stderr[-3000:]}")
    return run_dir, time.perf_counter() - started


def gnn_marks(predictions_csv: Path) -> dict[int, np.ndarray]:
    """Each test set's elements the GNN marks, in element order, from ``evaluate``'s predictions CSV."""
    rows = defaultdict(list)
    with open(predictions_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            rows[int(row["set"])].append((int(row["element"]), row["predicted"] == INSERTED))
    return {index: np.array([marked for _, marked in sorted(found)]) for index, found in rows.items()}


def seed_result(args: argparse.Namespace, seed: int) -> dict:
    import QuantumGrav as QG
    from QuantumGrav.data.dataset import split_indices
    from QuantumGrav.analyses.node_rival import fit_rule, fit_trees, marked_totals, totals_metrics

    run_dir, train_s = trained_run(args, seed)
    summary = json.loads((run_dir / "summary.json").read_text())
    run = QG.load_run(run_dir)
    predictions_csv = run_dir / "evaluations" / "located_blocks_test" / "predictions.csv"
    run.evaluate(run_dir / "config.yaml", split="test", out=predictions_csv)
    config = QG.load_config(run_dir / "config.yaml")
    dataset = config["data"]["type"](**config["data"]["kwargs"])
    train, _, test = split_indices(len(dataset), config["data"]["split"], config["data"]["split_seed"])
    train_items = [dataset[i] for i in train]
    rule, trees = fit_rule(train_items), fit_trees(train_items)
    marks = {"gnn": gnn_marks(predictions_csv)}
    items = {i: dataset[i] for i in test}
    marks["rule"] = {i: rule.predict(item.x) for i, item in items.items()}
    marks["trees"] = {i: trees(item.x) for i, item in items.items()}
    groups = defaultdict(list)
    for i in test:
        described = dataset.describe(i)
        kind, size = described["kind"], int(described["block_size"])
        for name in ("all", f"kind={kind}", f"block_size={size}", f"kind={kind} block_size={size}"):
            groups[name].append(i)
    totals = {name: {marker: marked_totals([marks[marker][i] for i in members], [items[i] for i in members],
                                           run.task).tolist() for marker in MARKERS}
              for name, members in groups.items()}
    return {"seed": seed, "train_seed": seed + 1000, "run_dir": str(run_dir), "train_wall_s": train_s,
            "best_epoch": summary.get("best_epoch"), "stopped_at_epoch": summary.get("stopped_at_epoch"),
            "epoch_cap": args.epochs, "stop_reason": summary.get("stop_reason"),
            "ended_by": "early_stopping" if summary.get("stopped_by") == "EarlyStopping" else "epoch_cap",
            "wall_time_s": summary.get("wall_time_s"), "rival_rule": rule.describe(),
            "sets": {name: len(members) for name, members in groups.items()}, "totals": totals,
            "metrics": {name: {marker: totals_metrics(torch.tensor(found[marker]), run.task) for marker in MARKERS}
                        for name, found in totals.items()}}


def natural_order(name: str) -> list:
    """Groups as a reader scans them: ``block_size=8`` before ``block_size=16``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def pooled(runs: list[dict]) -> dict:
    """Per group and marker: the metrics of the totals summed over seeds (sums and counts, then divided)."""
    from QuantumGrav.tasks.node import NodeBinaryTask
    from QuantumGrav.analyses.node_rival import totals_metrics

    task = NodeBinaryTask()
    found = {}
    for name in sorted({name for run in runs for name in run["totals"]}, key=natural_order):
        having = [run for run in runs if name in run["totals"]]
        found[name] = {"seeds": [run["seed"] for run in having], "sets": sum(run["sets"][name] for run in having),
                       **{marker: totals_metrics(sum(torch.tensor(run["totals"][name][marker]) for run in having), task)
                          for marker in MARKERS}}
    return found


def print_tables(results: dict) -> None:
    print(results["setup"])
    print("\n| data seed | ended by | best / stopped / cap | GNN F1 | GNN IoU | trees F1 | trees IoU | rule F1 | rule IoU |"
          "\n|---|---|---|---|---|---|---|---|---|")
    for run in results["runs"]:
        m = run["metrics"]["all"]
        print(f"| {run['seed']} | {run['ended_by']} | {run['best_epoch']} / {run['stopped_at_epoch']} / {run['epoch_cap']} | "
              + " | ".join(f"{m[k]['f1']:.3f} | {m[k]['iou']:.3f}" for k in ("gnn", "trees", "rule")) + " |")
    print("\npooled over seeds (totals summed, then divided)\n\n| group | seeds | sets | GNN F1 | GNN IoU | trees F1 | "
          "trees IoU | rule F1 | rule IoU |\n|---|---|---|---|---|---|---|---|---|")
    for name, row in results["pooled"].items():
        print(f"| {name} | {len(row['seeds'])} | {row['sets']} | "
              + " | ".join(f"{row[k]['f1']:.3f} | {row[k]['iou']:.3f}" for k in ("gnn", "trees", "rule")) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--per-kind", type=int, default=200, help="sets of each merged kind (default: %(default)s)")
    parser.add_argument("--n", type=int, nargs=2, default=[992, 1056], help="N range (default: %(default)s)")
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--epochs", type=int, default=150, help="the epoch cap (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--data", default="/tmp/located_blocks/data", help="where the stores are written")
    parser.add_argument("--runs", default="/tmp/located_blocks/runs", help="the runs' folders (reused if present)")
    study_results.add_arguments(parser, "seed")
    args = parser.parse_args()
    if args.results:
        print_tables(study_results.load(args.results)[1])
        return 0
    path, results = study_results.load(args.json)
    results["command"] = "python benchmarks/located_blocks/study_located_blocks.py " + " ".join(sys.argv[1:])
    results["setup"] = (f"{args.per_kind} merged and {args.per_kind} merged_ambiguous sets of {args.n[0]}..{args.n[1]} "
                        f"elements per data seed, blocks of exactly {args.block_sizes} elements in turn, split "
                        f"[0.7, 0.15, 0.15], up to {args.epochs} epochs under early stopping, training seed = data "
                        f"seed + 1000, {args.threads} torch thread(s), CPU")
    done = {run["seed"] for run in results["runs"]}
    for seed in (seed for seed in args.seeds if seed not in done):
        results["runs"].append(seed_result(args, seed))
        results["pooled"] = pooled(results["runs"])
        study_results.save(path, results)
    print_tables(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
