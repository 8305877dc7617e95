#!/usr/bin/env python3
"""The default job (``make train``'s command) on data seeds no study saw, with 1 and 2 threads: does the GNN
beat the strong baseline on every run, however the machine orders its floats?

    python benchmarks/default_model/seeds_default_job.py --seeds 21 22 23 24 25 --threads 1 2 \\
        --json benchmarks/default_model/results_seeds_default_job.json

The re-check of the hyperparameter study's ranking (``benchmarks/default_model/results_study_tune_recheck.json``): its best
configurations and the previous default, each re-trained on the study's re-training seeds 1-3, one thread::

    J=benchmarks/default_model/results_study_tune_recheck.json
    python benchmarks/default_model/seeds_default_job.py --seeds 1 2 3 --threads 1 --label default --json $J
    python benchmarks/default_model/seeds_default_job.py --seeds 1 2 3 --threads 1 --label "trial 22" --append --json $J \\
        --set training.optimizer_kwargs.lr=8.44e-3 --set training.optimizer_kwargs.weight_decay=1.26e-6
    python benchmarks/default_model/seeds_default_job.py --seeds 1 2 3 --threads 1 --label "trial 15" --append --json $J \\
        --set training.optimizer_kwargs.lr=1.96e-3 --set training.optimizer_kwargs.weight_decay=2.47e-6
    python benchmarks/default_model/seeds_default_job.py --seeds 1 2 3 --threads 1 --label "previous default" --append \\
        --json $J --set 'model.conv=!pyobject torch_geometric.nn.GraphConv' --set 'model.conv_kwargs={}' \\
        --set 'model.hidden_channels=[64, 64, 64]' --set model.pooling=mean_max \\
        --set training.optimizer_kwargs.lr=2e-3 --set training.optimizer_kwargs.weight_decay=5e-5

(The stored file ran these runs as two streams side by side, ``--parallel 1`` each, into two files merged into
one: its ``commands`` list them.)

Each run is ``python -m QuantumGrav train --config configs/train.yaml --set data.seed=S`` (figures and baselines
on, as ``make train``) in a fresh process with ``OMP_NUM_THREADS`` set. One-thread runs go two at a time on a
machine with two or more cores (each has a core), two-thread runs one at a time. Per run: the GNN's test
accuracy, both baselines', the best and the last epoch, the largest validation loss after epoch 5 relative to
the lowest one before it, the slowest and fastest epoch's training graphs/s. The JSON is rewritten after every
run, so an interrupted study keeps what it measured.

``benchmarks/default_model/results_make_train.json`` keeps the files of one such run on the default data: ``make train``
itself (data seed 1234, torch's default of 2 threads on 2 cores), its summary.json and metrics.csv.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study


def largest_jump_after(losses: list[float], epoch: int) -> float:
    """max over epochs e > ``epoch`` of val_loss[e] / min(val_loss[:e]): how far the curve jumps above its
    running minimum."""
    return max((losses[e] / min(losses[:e]) for e in range(epoch + 1, len(losses))), default=float("nan"))


def train(seed: int, threads: int, workdir: Path, extra: list[str], label: str) -> dict:
    run_name = f"{label.replace(' ', '_')}_seed{seed}_threads{threads}"
    command = [sys.executable, "-m", "QuantumGrav", "train", "--config", str(REPO / "configs" / "train.yaml"),
               "--set", f"data.seed={seed}", "--set", f"data.root={workdir}/data_{seed}",
               "--set", f"training.path={workdir}/runs", "--set", f"training.run_name={run_name}",
               "--set", "training.progress_bar=false", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("QUANTUMGRAV_SMOKE_TEST", None)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{run_name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    run_dir = workdir / "runs" / run_name
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv") as f:
        history = list(csv.DictReader(f))
    losses = [float(r["val_loss"]) for r in history]
    rates = [float(r["graphs_per_s"]) for r in history]
    baselines = summary["baselines"]
    return {"label": label, "overrides": extra[1::2], "seed": seed, "threads": threads,
            "gnn": summary["test_accuracy"],
            "strong_baseline": baselines["strong"]["accuracy"], "simple_baseline": baselines["simple"]["accuracy"],
            "gain_points": 100 * (summary["test_accuracy"] - baselines["strong"]["accuracy"]),
            "best_epoch": summary["best_epoch"], "stopped_at_epoch": summary["stopped_at_epoch"],
            "stop_reason": summary["stop_reason"], "val_loss": losses,
            "largest_val_jump_after_epoch_5": largest_jump_after(losses, 5),
            "graphs_per_s_slowest": min(rates[1:] or rates), "graphs_per_s_fastest": max(rates[1:] or rates),
            "wall_s": time.perf_counter() - started}


def summarise(runs: list[dict]) -> dict:
    gnn = [r["gnn"] for r in runs]
    by_seed: dict[int, list[float]] = {}
    for r in runs:
        by_seed.setdefault(r["seed"], []).append(r["gnn"])
    return {"runs": len(runs), "gnn_mean": statistics.mean(gnn), "gnn_min": min(gnn), "gnn_max": max(gnn),
            "gnn_spread_points": 100 * (max(gnn) - min(gnn)),
            "strong_mean": statistics.mean(r["strong_baseline"] for r in runs),
            "simple_mean": statistics.mean(r["simple_baseline"] for r in runs),
            "gain_min_points": min(r["gain_points"] for r in runs),
            # the same data and seed, another float order: how much the machine moves the result
            "largest_thread_difference_points": max(
                (100 * (max(a) - min(a)) for a in by_seed.values() if len(a) > 1), default=None),
            "gnn_at_or_above_strong_in": sum(r["gain_points"] >= 0 for r in runs),
            "largest_val_jump_after_epoch_5": max(r["largest_val_jump_after_epoch_5"] for r in runs)}


def print_table(runs: list[dict]) -> None:
    print(f"{runs[0]['label']}:")  # one configuration
    print("| seed | threads | GNN | strong baseline | simple baseline | gain (points) | best / last epoch | "
          "largest val jump after epoch 5 | graphs/s slowest-fastest |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for r in sorted(runs, key=lambda r: (r["seed"], r["threads"])):
        print(f"| {r['seed']} | {r['threads']} | {r['gnn']:.3f} | {r['strong_baseline']:.3f} | "
              f"{r['simple_baseline']:.3f} | {r['gain_points']:+.1f} | {r['best_epoch']} / {r['stopped_at_epoch']} | "
              f"{r['largest_val_jump_after_epoch_5']:.2f}x | {r['graphs_per_s_slowest']:.0f}-"
              f"{r['graphs_per_s_fastest']:.0f} |")
    s = summarise(runs)
    threads = s["largest_thread_difference_points"]
    print(f"\nGNN {s['gnn_mean']:.3f} (min {s['gnn_min']:.3f}, max {s['gnn_max']:.3f}, spread "
          f"{s['gnn_spread_points']:.1f} points; same seed, other thread count: at most "
          f"{'-' if threads is None else f'{threads:.1f}'} points); strong baseline {s['strong_mean']:.3f}; at or above the strong "
          f"baseline in {s['gnn_at_or_above_strong_in']} of {s['runs']} runs; largest validation jump after "
          f"epoch 5: {s['largest_val_jump_after_epoch_5']:.2f}x its running minimum")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[21, 22, 23, 24, 25])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to the command")
    parser.add_argument("--json", default="benchmarks/default_model/results_seeds_default_job.json")
    parser.add_argument("--parallel", type=int, default=None,
                        help="runs at a time (default: the cores divided by the threads of a run)")
    parser.add_argument("--label", default="default", help="the configuration's name in the table and the JSON")
    parser.add_argument("--append", action="store_true",
                        help="add to the runs of --json (another configuration) instead of replacing them")
    args = parser.parse_args()
    import study_results  # benchmarks/study_results.py: written whole or not at all
    from QuantumGrav.common import files  # noqa: F401  (now, not at the first write, while timed jobs run)

    extra = [a for item in args.set for a in ("--set", item)]
    earlier = json.loads(Path(args.json).read_text()) if args.append else {"commands": [], "runs": []}
    runs: list[dict] = []
    command = {"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.UTC).isoformat(),
               "machine": {"cpus": os.cpu_count(), "load_average_before": os.getloadavg(),
                           "platform": platform.platform()}}

    def store() -> None:
        every = earlier["runs"] + runs
        labels = dict.fromkeys(r["label"] for r in every)
        study_results.write_json(args.json, {
            "commands": earlier["commands"] + [command],
            "summary": {label: summarise([r for r in every if r["label"] == label]) for label in labels},
            "runs": every}, indent=1)

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for threads in args.threads:
            parallel = args.parallel or max(1, (os.cpu_count() or 1) // threads)
            with ThreadPoolExecutor(parallel) as pool:
                for run in pool.map(lambda seed: train(seed, threads, workdir, extra, args.label), args.seeds):
                    runs.append(run)
                    print(f"seed {run['seed']}, {threads} thread(s): GNN {run['gnn']:.3f}, strong "
                          f"{run['strong_baseline']:.3f}, best epoch {run['best_epoch']}, "
                          f"{run['wall_s']:.0f} s", file=sys.stderr, flush=True)
                    store()
    print_table(runs)
    print(f"\nstored in {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
