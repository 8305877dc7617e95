#!/usr/bin/env python3
"""Upstream QuantumGrav's question answered with numbers: is a causal set manifold-like, over QuantumGrav.jl's nine
kinds (configs/manifold_like.yaml), per model, over data seeds never used to tune anything.

    python benchmarks/study_manifold_like.py --seeds 1 2 3 --json benchmarks/results_manifold_like.json
    python benchmarks/study_manifold_like.py --results benchmarks/results_manifold_like.json   # the tables only
    # larger sets, fewer of them (each GNN run at N ~ 512 took 1 to 1.5 hours here, three runs sharing 2 cores)
    python benchmarks/study_manifold_like.py --per-kind 200 --n 480 544 --json benchmarks/results_manifold_like_n512.json

Rows, each trained and tested on the same sets and split of every data seed (``data.kwargs.seed``; the training
seed is the data seed too):

* ``gnn``: the default model (``configs/manifold_like.yaml`` as it is);
* ``gnn_without_invariants``: the same without the order invariants in its head (``model.graph_features=false``):
  is it the graph or the invariants?
* ``upstream_gcn``: upstream QuantumGrav's model (``configs/upstream_gcn.yaml``);
* ``upstream_gcn_balanced``: its class-balanced variant (``configs/upstream_gcn_balanced.yaml``);
* ``simple_baseline``, ``strong_baseline`` and ``strongest_baseline``: ``QuantumGrav.evaluation.baselines`` fitted on
  the training split (the strong one on the invariants and the distribution of every per-element feature, as
  manifold_like.yaml's runs fit it; the strongest rival adds the exact 2D-order test and the graph observables);
* ``exact_test``: the exact test alone (manifold-like iff a 2D order), nothing fitted;
* ``ceiling``: per kind, the test sets no model can call and those the exact test cannot (``evaluation.ceiling``).

Each row records accuracy, balanced accuracy, ROC-AUC, weighted F1 (upstream's metric), per-class F1, recall per
kind with its Wilson interval (the baseline rows also on the sets a model can call) and the recall against each
defect's realised size with the threshold where that curve crosses 90 % recall (``QuantumGrav.evaluation.kinds``). Runs
are separate processes (``python -m QuantumGrav train``), one after the other, ``--threads`` torch threads each;
results are written after every row, and a row already in ``--json`` is not run again (a stopped study continues).
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))

MODELS = {  # run in this order: the cheap ones first
    "upstream_gcn": ("configs/upstream_gcn.yaml", []),
    "upstream_gcn_balanced": ("configs/upstream_gcn_balanced.yaml", []),
    "gnn": ("configs/manifold_like.yaml", []),
    "gnn_without_invariants": ("configs/manifold_like.yaml", ["model.graph_features=false"]),
}
BASELINES = ("simple_baseline", "strong_baseline", "strongest_baseline", "exact_test")
ROWS = (*BASELINES, *MODELS)
KEPT = ("test_accuracy", "test_balanced_accuracy", "test_roc_auc", "test_weighted_f1", "test_f1", "per_class_f1",
        "by_kind", "by_defect_size", "num_test", "best_epoch", "stopped_at_epoch", "wall_time_s")


def data_settings(args: argparse.Namespace, seed: int) -> list[str]:
    return [f"data.kwargs.path={args.data}", f"data.kwargs.seed={seed}", f"data.kwargs.num_per_kind={args.per_kind}",
            f"data.kwargs.n_min={args.n[0]}", f"data.kwargs.n_max={args.n[1]}"]


def train_row(args: argparse.Namespace, row: str, seed: int) -> dict:
    """One model on one data seed, trained by the CLI in its own process; what its summary.json reports."""
    config, overrides = MODELS[row]
    with tempfile.TemporaryDirectory(prefix="qg_manifold_like_") as runs:
        settings = [*data_settings(args, seed), *overrides, f"training.path={runs}", "training.run_name=run",
                    f"training.seed={seed}", "training.num_workers=0", "training.progress_bar=false",
                    "training.figures=false", "testing.baselines=false", f"training.num_epochs={args.epochs}"]
        command = [sys.executable, "-m", "QuantumGrav", "train", "--config", config]
        for setting in settings:
            command += ["--set", setting]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "QUANTUMGRAV_SMOKE_TEST": "0",
               "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), os.environ.get("PYTHONPATH", "")])}
        started = time.perf_counter()
        finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        if finished.returncode != 0:
            raise RuntimeError(f"{row} seed {seed} failed:\n{finished.stderr[-3000:]}")
        summary = json.loads((Path(runs) / "run" / "summary.json").read_text())
    return {**{key: summary.get(key) for key in KEPT}, "seconds": time.perf_counter() - started}


def baseline_rows(args: argparse.Namespace, seed: int) -> dict[str, dict]:
    """The baselines, the strongest rival and the exact 2D-order test alone on the split that the runs of ``seed``
    use, with the recall per kind (on all test sets and on those a model can call) and per defect size; and the
    ceiling of the test split (``evaluation.ceiling``) as the row ``ceiling``."""
    import numpy as np

    import QuantumGrav as QG
    from QuantumGrav.data.dataset import split_indices
    from QuantumGrav.data.derived_invariants import causal_matrix_of_edges
    from QuantumGrav.evaluation.baselines import predict_baselines, score_baselines
    from QuantumGrav.evaluation.ceiling import callable_sets, ceiling_counts, exact_test_predictions
    from QuantumGrav.evaluation.kinds import kind_breakdown
    from QuantumGrav.evaluation.scores import classification_metrics

    config = QG.load_config(REPO / "configs" / "manifold_like.yaml", data_settings(args, seed))
    dataset = config["data"]["type"](**config["data"]["kwargs"])
    train, _, test = split_indices(len(dataset), config["data"]["split"], config["data"]["split_seed"])
    features = config["testing"]["strong_baseline"]
    baseline_test = predict_baselines(dataset, train, test, "classification", features, strongest=True)
    truth, predictions = baseline_test.truth, dict(baseline_test.predictions)
    scores = score_baselines("classification", truth, predictions, dataset.num_classes, features,
                             baseline_test.positive_scores)
    descriptions = [dataset.describe(i) for i in test]
    relations = [causal_matrix_of_edges(dataset[i].edge_index, int(dataset[i].num_nodes)) for i in test]
    predictions["exact_test"] = exact_test_predictions(relations)
    scores["exact_test"] = {"method": "the exact test alone: manifold-like iff a 2D order",
                            **classification_metrics(truth, predictions["exact_test"], 2, predictions["exact_test"])}
    names = {name: name if name == "exact_test" else f"{name}_baseline" for name in predictions}
    correct = {names[name]: np.asarray(p) == truth for name, p in predictions.items()}
    breakdown = kind_breakdown(descriptions, correct)
    changed = callable_sets(descriptions, relations)
    on_changed = kind_breakdown([d for d, c in zip(descriptions, changed) if c],
                                {row: hits[changed] for row, hits in correct.items()})
    rows = {"ceiling": {"num_test": len(test), "by_kind": ceiling_counts(descriptions, relations, truth.tolist())}}
    for name, row in names.items():
        rows[row] = {"test_accuracy": scores[name]["accuracy"], "test_weighted_f1": scores[name]["weighted_f1"],
                     "test_balanced_accuracy": scores[name]["balanced_accuracy"],
                     "test_roc_auc": scores[name].get("roc_auc"), "per_class_f1": scores[name]["per_class_f1"],
                     "method": scores[name]["method"], "num_test": len(test), "num_test_changed": int(changed.sum()),
                     "by_kind": {row: breakdown["by_kind"][row]},
                     "by_kind_changed": {row: on_changed["by_kind"][row]},
                     "by_defect_size": {kind: {"size": sizes["size"], row: sizes[row]}
                                        for kind, sizes in breakdown["by_defect_size"].items()}}
    return rows


def spread(values: list[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "undefined"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}"


def print_recall(runs: list[dict], key: str, title: str) -> None:
    """Each row's recall per kind under ``key`` (``by_kind`` or ``by_kind_changed``), the mean over seeds."""
    rows = [run for run in runs if run["row"] in ROWS and run.get(key)]
    kinds = sorted({kind for run in rows for kind in run[key][run["row"]]})
    print(f"\n{title}\n\n| row | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
    for row in ROWS:
        done = [run[key][row] for run in rows if run["row"] == row]
        if done:
            print(f"| {row} | " + " | ".join(f"{statistics.mean(d[k]['recall'] for d in done if k in d):.3f}"
                                               for k in kinds) + " |")


def print_tables(results: dict) -> None:
    runs = results["runs"]
    print(f"{results['setup']}\n")
    print("| row | seeds | accuracy | balanced accuracy | ROC-AUC | weighted F1 |\n|---|---|---|---|---|---|")
    for row in ROWS:
        done = [run for run in runs if run["row"] == row]
        if done:
            print(f"| {row} | {len(done)} | " + " | ".join(spread([r.get(key) for r in done]) for key in (
                "test_accuracy", "test_balanced_accuracy", "test_roc_auc", "test_weighted_f1")) + " |")
    print_recall(runs, "by_kind", "recall per kind (mean over seeds)")
    print_recall(runs, "by_kind_changed", "recall per kind on the sets a model can call (mean over seeds)")
    ceilings = [run["by_kind"] for run in runs if run["row"] == "ceiling"]
    if ceilings:
        print("\nceiling of the test splits (summed over seeds)\n\n| kind | sets | no model can call | 2D orders "
              "| the exact test cannot call |\n|---|---|---|---|---|")
        for kind in sorted({kind for ceiling in ceilings for kind in ceiling}):
            totals = [sum(c[kind][key] for c in ceilings if kind in c) for key in (
                "sets", "no_model_can_call", "two_dimensional", "exact_test_cannot_call")]
            print(f"| {kind} | " + " | ".join(map(str, totals)) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--per-kind", type=int, default=1000, help="sets of each kind (default: %(default)s)")
    parser.add_argument("--n", type=int, nargs=2, default=[64, 128], help="N range (default: QuantumGrav.jl's)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--data", default=str(REPO / "data" / "kinds"), help="where the stores are written")
    parser.add_argument("--json", help="results file: written after every row; rows in it are not run again")
    parser.add_argument("--results", help="print the tables of a results file and exit")
    args = parser.parse_args()
    if args.results:
        print_tables(json.loads(Path(args.results).read_text()))
        return 0
    path = Path(args.json) if args.json else None
    results = json.loads(path.read_text()) if path and path.exists() else {"runs": []}
    results["setup"] = (f"{args.per_kind} sets per kind, N {args.n[0]}..{args.n[1]}, split [0.7, 0.15, 0.15], "
                        f"up to {args.epochs} epochs, {args.threads} torch thread(s) per run, CPU")
    done = {(run["row"], run["seed"]) for run in results["runs"]}
    for seed in args.seeds:
        if any(row in BASELINES and (row, seed) not in done for row in args.rows):
            for row, result in baseline_rows(args, seed).items():
                if (row in args.rows or row == "ceiling") and (row, seed) not in done:
                    results["runs"].append({"row": row, "seed": seed, **result})
            save(path, results)
    for row in (row for row in args.rows if row in MODELS):
        for seed in args.seeds:
            if (row, seed) in done:
                continue
            results["runs"].append({"row": row, "seed": seed, **train_row(args, row, seed)})
            save(path, results)
            print(f"{row} seed {seed}: weighted F1 {results['runs'][-1]['test_weighted_f1']:.3f}", flush=True)
    print_tables(results)
    return 0


def save(path: Path | None, results: dict) -> None:
    if path is not None:
        from QuantumGrav.common.files import atomic_write_text

        atomic_write_text(path, json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
