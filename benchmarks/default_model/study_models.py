#!/usr/bin/env python3
"""Which GNN beats the physics baselines? Candidates (model x node features x edges) over data seeds.

    python benchmarks/default_model/study_models.py --seeds 1234 1 2 --workers 15 --threads 1 --sweep   # the study (16 cores)
    python benchmarks/default_model/study_models.py --seeds 1 --samples 200 --epochs 2 --candidates default hybrid

Every job trains one candidate on one data seed with ``QG.Trainer`` and ``configs/train.yaml``
(only the overrides below differ), in its own process (``--threads`` torch threads each), and
reports test accuracy, per-class recall, parameters, seconds per epoch and both baselines of
``QuantumGrav.evaluation.baselines`` on the same split. The table gives mean +- std over the seeds.

The flip-fraction sweep (``--sweep``): the ``sweep`` candidate and both baselines are trained on
sets whose destroyed members have flip fractions log-uniform in [0.001, 0.1], then scored on
``--sweep-sets`` fresh destroyed sets; the second table is the share of them recognised as
destroyed, per flip-fraction bin. A benchmark, not a test.

``benchmarks/default_model/results_study_models.json`` holds the measured results (print them with
``--results``): two runs on a 16-core machine (CPU only, torch 2.11, one thread per job):
``--seeds 1234 1 2 --workers 15 --threads 1 --sweep --sweep-sets 1500`` (all candidates; that
run's sweep used the hybrid) and ``--seeds 3 4 5 6 7 8 9 10 --candidates both_ways hybrid --sweep
--sweep-seeds 1234 1 2 --workers 15 --threads 1 --sweep-sets 1500`` (its sweep: both_ways).
Seconds per epoch in the table are from that machine, one thread per job. Those sets were drawn with
the generator's previous random streams. On today's generator (blocks of 128 sets, each with its own
stream), a 2-core machine, torch 2.13:
``--seeds 1234 1 2 --candidates hybrid --epochs 40 --workers 2 --threads 1`` ->
``results_study_generator_v4_40_epochs.json``, and the same with ``--epochs 15`` ->
``results_study_generator_v4_15_epochs.json``.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
BASIC_FEATURES = 6  # the first six NODE_FEATURES: cones, links, longest chains (the features before intervals)
SWEEP_RANGE = (0.001, 0.1)
SWEEP_BINS = np.logspace(-3, -1, 6)  # five log-spaced bins of the flip fraction

# name: (description, overrides of configs/train.yaml; "features": "basic" keeps the first six node features)
CANDIDATES = {
    "default_v1": ("GraphConv, basic features, links, past->future (the previous default)",
                   {"features": "basic"}),
    "intervals": ("GraphConv, + interval node features, links, past->future", {}),
    "both_ways": ("GraphConv, + interval features, links, both directions", {"model.directions": "both"}),
    "relations": ("GraphConv, + interval features, relations, both directions",
                  {"model.directions": "both", "data.edges": "relations"}),
    "hybrid_v1": ("basic features, links, past->future, + invariants in the head",
                  {"features": "basic", "model.graph_features": True}),
    "hybrid": ("interval features, links, both directions, + invariants in the head",
               {"model.directions": "both", "model.graph_features": True}),
    "hybrid_relations": ("interval features, relations, both directions, + invariants in the head",
                         {"model.directions": "both", "model.graph_features": True, "data.edges": "relations"}),
}
SWEEP_CANDIDATE = "hybrid"  # the default model of configs/train.yaml


def first_features_model():
    """A GNNClassifier that sees only the first BASIC_FEATURES node features (the old feature set)."""
    from QuantumGrav.models.gnn import GNNClassifier

    class FirstFeaturesGNN(GNNClassifier):
        def __init__(self, in_channels, num_classes, **kwargs):
            super().__init__(BASIC_FEATURES, num_classes, **kwargs)

        def forward(self, data):
            data = data.clone()
            data.x = data.x[:, :BASIC_FEATURES]
            return super().forward(data)

    return FirstFeaturesGNN


def job_config(name: str, seed: int, args, workdir: str) -> dict:
    import QuantumGrav as QG
    from QuantumGrav.data.causal_sets import INVARIANT_NAMES

    overrides = dict(CANDIDATES[name][1])
    features = overrides.pop("features", "all")
    overrides.update({"training.num_epochs": args.epochs, "training.path": f"{workdir}/runs",
                      "training.progress_bar": False, "training.device": "cpu", "data.seed": seed,
                      "data.num_samples": args.samples, "data.root": args.data_root})
    if args.sweep_job:
        overrides["data.destroy_fraction"] = list(SWEEP_RANGE)
    config = QG.load_config(str(REPO / "configs/train.yaml"), overrides)
    if features == "basic":
        model = config["model"]
        keys = ("conv", "conv_kwargs", "hidden_channels", "norm", "activation", "dropout", "pooling",
                "head_hidden", "directions")
        kwargs = {k: model[k] for k in keys}
        kwargs["graph_features"] = len(INVARIANT_NAMES) if model["graph_features"] else 0
        config["model"] = {**model, "type": first_features_model(), "kwargs": kwargs}
    return config


def recall_by_bin(predicted_destroyed: np.ndarray, fractions: np.ndarray) -> list[float]:
    bins = np.digitize(fractions, SWEEP_BINS[1:-1])
    return [float(predicted_destroyed[bins == b].mean()) for b in range(len(SWEEP_BINS) - 1)]


def sweep_curves(trainer, args) -> dict:
    """Share of fresh destroyed sets recognised as destroyed, per flip-fraction bin: GNN and both baselines."""
    import torch
    from torch_geometric.loader import DataLoader

    from QuantumGrav.evaluation.baselines import fit_and_predict, invariants_matrix, labels_vector
    from QuantumGrav.data.dataset import CausalSetDataset

    edges = trainer.config["data"]["edges"]
    evaluation = CausalSetDataset(args.data_root, num_samples=args.sweep_sets, classes=("destroyed",),
                                  destroy_fraction=SWEEP_RANGE, edges=edges, seed=10_000 + args.seed)
    fractions = np.array([float(g.flip_fraction) for g in evaluation])
    destroyed = trainer.dataset.class_names.index("destroyed")
    model = trainer.core_model.eval()
    with torch.no_grad():
        gnn = torch.cat([model(batch).argmax(-1) for batch in DataLoader(evaluation, batch_size=256)]).numpy()
    X, y = invariants_matrix(trainer.dataset), labels_vector(trainer.dataset)
    train = np.asarray(trainer.split["train"])
    baselines = fit_and_predict("classifier", X[train], y[train], invariants_matrix(evaluation))
    curves = {"gnn": recall_by_bin(gnn == destroyed, fractions)}
    curves.update({name: recall_by_bin(pred == destroyed, fractions) for name, pred in baselines.items()})
    return {"bins": SWEEP_BINS.tolist(), "curves": curves, "sets_per_bin": np.bincount(
        np.digitize(fractions, SWEEP_BINS[1:-1]), minlength=len(SWEEP_BINS) - 1).tolist()}


def run_job(args) -> dict:
    """One candidate on one data seed, in this process."""
    import torch

    import QuantumGrav as QG

    torch.set_num_threads(args.threads)
    QG.setup_logging(level="WARNING")
    with tempfile.TemporaryDirectory() as workdir:
        trainer = QG.Trainer(job_config(args.candidate, args.seed, args, workdir))
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        started = time.perf_counter()
        trainer.run_training(train_loader, val_loader)
        train_s = time.perf_counter() - started
        test = trainer.run_test(test_loader)
        confusion = np.asarray(test["confusion_matrix"], dtype=float)
        epochs = [row["epoch_time_s"] for row in trainer.history]
        result = {"candidate": args.candidate, "seed": args.seed, "accuracy": test["test_accuracy"],
                  "recall": (np.diag(confusion) / confusion.sum(axis=1)).tolist(),
                  "class_names": test["class_names"], "baselines": test["baselines"],
                  "parameters": QG.count_parameters(trainer.model)["total_params"],
                  "epoch_s": statistics.median(epochs), "epochs": len(epochs), "train_s": train_s}
        if args.sweep_job:
            result["sweep"] = sweep_curves(trainer, args)
        trainer.close()
    return result


def generate(root: str, samples: int, seed: int, edges: str) -> None:
    from QuantumGrav.data.dataset import CausalSetDataset

    CausalSetDataset(root, num_samples=samples, seed=seed, edges=edges)


def launch_all(args) -> list[dict]:
    """Every (candidate, seed) job as a subprocess, ``--workers`` at a time; results as they finish."""
    import study_results  # benchmarks/study_results.py: written whole or not at all
    from QuantumGrav.common import files  # noqa: F401  (now, not at the first write, while timed jobs run)

    edge_kinds = sorted({CANDIDATES[c][1].get("data.edges", "links") for c in args.candidates})
    with ProcessPoolExecutor(args.workers) as pool:  # generate once, before the jobs (which would all generate)
        list(pool.map(partial(generate, args.data_root, args.samples),
                      *zip(*[(seed, edges) for seed in args.seeds for edges in edge_kinds])))
    # slowest first (relation edges: many more messages), so that the last jobs to start are short ones
    jobs = sorted([(c, s, False) for s in args.seeds for c in args.candidates],
                  key=lambda job: "data.edges" not in CANDIDATES[job[0]][1])
    if args.sweep:  # first: they also generate their own data
        jobs = [(SWEEP_CANDIDATE, s, True) for s in args.sweep_seeds or args.seeds] + jobs
    common = ["--samples", str(args.samples), "--epochs", str(args.epochs), "--threads", str(args.threads),
              "--data-root", args.data_root, "--sweep-sets", str(args.sweep_sets)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    pending, running, results = list(jobs), [], []
    while pending or running:
        while pending and len(running) < args.workers:
            candidate, seed, sweep = pending.pop(0)
            command = [sys.executable, __file__, "--job", candidate, "--seeds", str(seed), *common]
            running.append(subprocess.Popen(command + (["--sweep-job"] if sweep else []), env=env,
                                            stdout=subprocess.PIPE, text=True))
        time.sleep(0.5)
        for process in [p for p in running if p.poll() is not None]:
            running.remove(process)
            output = process.stdout.read().strip().splitlines()
            if process.returncode == 0 and output:
                results.append(json.loads(output[-1]))
                print(f"done: {results[-1]['candidate']} seed {results[-1]['seed']}", file=sys.stderr, flush=True)
                if args.out:
                    study_results.write_json(args.out, results, indent=1)
            else:
                print(f"job failed: {process.args}", file=sys.stderr)
    return results


def mean_std(values) -> str:
    values = list(values)
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def print_tables(results: list[dict]) -> None:
    main = [r for r in results if "sweep" not in r]
    seeds_of = [{r["seed"] for r in main if r["candidate"] == name} for name in CANDIDATES]
    common = set.intersection(*[seeds for seeds in seeds_of if seeds])
    if any(seeds and seeds != common for seeds in seeds_of):  # compare like with like first
        print(f"On the data seeds every candidate ran on, {sorted(common)}:\n")
        print_main_table([r for r in main if r["seed"] in common])
        print("\nOn all the seeds each candidate ran on:\n")
    print_main_table(main)
    for candidate in CANDIDATES:
        sweeps = [r["sweep"] for r in results if "sweep" in r and r["candidate"] == candidate]
        if sweeps:
            print_sweep(candidate, sweeps)


def print_main_table(main: list[dict]) -> None:
    names = main[0]["class_names"]
    strong_by_seed = {r["seed"]: r["baselines"]["strong"]["accuracy"] for r in main}  # same split for all candidates
    print(f"| candidate | seeds | test accuracy (mean ± std over seeds) | gain over the strong baseline (paired by "
          f"seed) | recall {' / '.join(names)} | parameters | s/epoch | epochs |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for name in CANDIDATES:
        runs = [r for r in main if r["candidate"] == name]
        if runs:
            recall = np.nanmean([r["recall"] for r in runs], axis=0)
            print(f"| {name}: {CANDIDATES[name][0]} | {len(runs)} | {mean_std(r['accuracy'] for r in runs)} | "
                  f"{mean_std(r['accuracy'] - strong_by_seed[r['seed']] for r in runs)} | "
                  f"{' / '.join(f'{v:.2f}' for v in recall)} | {runs[0]['parameters']:,} | "
                  f"{statistics.mean(r['epoch_s'] for r in runs):.2f} | "
                  f"{statistics.mean(r['epochs'] for r in runs):.0f} |")
    one_per_seed = list({r["seed"]: r["baselines"] for r in main}.values())
    for name in ("simple", "strong"):
        runs = [baselines[name] for baselines in one_per_seed]
        recall = np.mean([r["per_class_recall"] for r in runs], axis=0)
        print(f"| {name} baseline: {runs[0]['method']} | {len(runs)} | {mean_std(r['accuracy'] for r in runs)} | | "
              f"{' / '.join(f'{v:.2f}' for v in recall)} | | | |")
    print(f"\nseeds: {sorted({r['seed'] for r in main})}")


def print_sweep(candidate: str, sweeps: list[dict]) -> None:
    bins = sweeps[0]["bins"]
    print(f"\nDestroyed sets recognised as destroyed, by flip fraction: {candidate} and the baselines trained on "
          f"flip fractions {SWEEP_RANGE[0]}..{SWEEP_RANGE[1]}, mean over {len(sweeps)} seeds, about "
          f"{np.mean([s['sets_per_bin'] for s in sweeps]):.0f} sets per bin and seed")
    print("| flip fraction | " + " | ".join(f"{a:.4f}-{b:.4f}" for a, b in zip(bins, bins[1:])) + " |")
    print("|---|" + "---:|" * (len(bins) - 1))
    for model in ("gnn", "simple", "strong"):
        curve = np.mean([s["curves"][model] for s in sweeps], axis=0)
        print(f"| {model} | " + " | ".join(f"{v:.2f}" for v in curve) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1234, 1, 2])
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--workers", type=int, default=1, help="jobs at once")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per job")
    parser.add_argument("--data-root", default=str(Path(tempfile.gettempdir()) / "qg_study_data"))
    parser.add_argument("--sweep", action="store_true", help="also the accuracy-vs-flip-fraction sweep")
    parser.add_argument("--sweep-sets", type=int, default=1000)
    parser.add_argument("--sweep-seeds", type=int, nargs="+", help="data seeds of the sweep (default: --seeds)")
    parser.add_argument("--out", help="write the raw results (JSON) here as jobs finish")
    parser.add_argument("--results", help="print the tables of a results file written by --out, then stop")
    parser.add_argument("--job", dest="candidate", help=argparse.SUPPRESS)
    parser.add_argument("--sweep-job", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.results:
        print_tables(json.loads(Path(args.results).read_text()))
    elif args.candidate:
        args.seed = args.seeds[0]
        print(json.dumps(run_job(args)))
    else:
        print_tables(launch_all(args))


if __name__ == "__main__":
    main()
