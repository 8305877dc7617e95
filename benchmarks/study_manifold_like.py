#!/usr/bin/env python3
"""Upstream QuantumGrav's question answered with numbers: is a causal set manifold-like, over QuantumGrav.jl's nine
kinds (configs/manifold_like.yaml), per model, over data seeds never used to tune anything.

    python benchmarks/study_manifold_like.py --seeds 1 2 3 --json benchmarks/results_manifold_like.json
    python benchmarks/study_manifold_like.py --results benchmarks/results_manifold_like.json   # the tables only
    # larger sets, fewer of them (each GNN run at N ~ 512 took 1 to 1.5 hours here, three runs sharing 2 cores)
    python benchmarks/study_manifold_like.py --per-kind 200 --n 480 544 --json benchmarks/results_manifold_like_n512.json

Rows, each trained and tested on the same sets and split of every data seed (``data.kwargs.seed``). A model's
training seed (``training.seed``: initialisation, batch order, dropout) is the data seed plus ``--train-seed-offset``,
so that the draw of the sets and the draw of the training are not one and the same; each row records its
``train_seed``, and a model row whether it ended by early stopping or at its epoch cap (``ended_by``, ``best_epoch``,
``stopped_at_epoch``, ``epoch_cap``) and how flat its validation loss was when it stopped (``flatness``: the
validation loss at the best epoch, the change of the windowed loss over the last ``patience`` epochs, the learning
rate at the stop; read from the run's metrics.csv, and ``not recorded`` for rows run before the study kept it). With
``--runs DIR`` each model run's folder stays on disk as ``DIR/<row>_seed<seed>`` (checkpoints, metrics, logs):

* ``gnn``: the default model (``configs/manifold_like.yaml`` as it is);
* ``gnn_plateau``: the default model with a schedule whose length follows the data (``ReduceLROnPlateau`` on early
  stopping's metric, factor 0.3, patience 3, against early stopping's 10): does a run that ends annealed close the gap
  of ``gnn``, whose cosine over the epoch cap has hardly decayed when early stopping ends it?
* ``gnn_without_invariants``: the same without the order invariants in its head (``model.graph_features=false``):
  is it the graph or the invariants?
* ``upstream_gcn``: upstream QuantumGrav's model (``configs/upstream_gcn.yaml``);
* ``upstream_gcn_balanced``: its class-balanced variant (``configs/upstream_gcn_balanced.yaml``);
* ``order_gnn_hybrid`` and ``order_head_only_hybrid``: the controls of the order models, the default GNN with the
  strongest rival's per-set features (exact test, observables) in its head and that head alone on the same features
  (``configs/order_hybrid.yaml``, ``configs/order_head_only.yaml``; ``benchmarks/order_models/``);
* the models made for orders, purely learned (``benchmarks/order_models/``): ``order_typed_relations`` (its readout
  ``_mean`` instead of the distribution, or with an element-level ``_realizer``), ``order_pair_network`` (triangle
  updates with a realizer head; ``_no_realizer`` without) and ``order_gps`` (upstream's next model);
* ``simple_baseline``, ``strong_baseline`` and ``strongest_baseline``: ``QuantumGrav.evaluation.baselines`` fitted on
  the training split (the strong one on the invariants and the distribution of every per-element feature, as
  manifold_like.yaml's runs fit it; the strongest rival adds the exact 2D-order test and the graph observables);
* ``exact_test``: the exact test alone (manifold-like iff a 2D order), nothing fitted;
* ``ceiling``: per kind, the test sets no model can call and those the exact test cannot (``analyses.ceiling``).

The tables end with the paired comparison of each model row with the strongest rival: per data seed where both
rows exist, the model's weighted F1 and balanced accuracy minus the rival's, their mean +- standard deviation, a paired
t-test and the Wilcoxon signed-rank test (``scipy.stats``). Each row records accuracy, balanced accuracy, ROC-AUC, weighted F1 (upstream's metric), per-class F1, recall per
kind with its Wilson interval (the baseline rows also on the sets a model can call) and the recall against each
defect's realised size with the threshold where that curve crosses 90 % recall (``QuantumGrav.analyses.kind_breakdown``). Runs
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

import study_results  # noqa: E402  (benchmarks/study_results.py: the --json results file)

MODELS = {  # run in this order: the cheap ones first
    "upstream_gcn": ("configs/upstream_gcn.yaml", []),
    "upstream_gcn_balanced": ("configs/upstream_gcn_balanced.yaml", []),
    "gnn": ("configs/manifold_like.yaml", []),
    "gnn_without_invariants": ("configs/manifold_like.yaml", ["model.graph_features=false"]),
    # The schedule follows the data: the LR is cut to 0.3x after 3 epochs without improvement of early stopping's
    # metric, so a run stopped after its 10 epochs of patience has been annealed at least twice (>= 11x lower).
    "gnn_plateau": ("configs/manifold_like.yaml", ["training.scheduler_type=!pyobject torch.optim.lr_scheduler.ReduceLROnPlateau",
                                                   "training.scheduler_kwargs={factor: 0.3, patience: 3}"]),
    # The order models' controls and families (benchmarks/order_models/README.md): hybrids read the strongest rival's
    # own per-set features (the exact test, the observables) and say so in their name.
    "order_head_only_hybrid": ("configs/order_head_only.yaml", []),
    "order_gnn_hybrid": ("configs/order_hybrid.yaml", []),
    "order_typed_relations": ("configs/order_typed_relations.yaml", []),
    "order_typed_relations_mean": ("configs/order_typed_relations.yaml", ["model.kwargs.readout=mean"]),
    "order_typed_relations_realizer": ("configs/order_typed_relations.yaml", ["model.kwargs.realizer_dimension=2"]),
    "order_pair_network": ("configs/order_pair_network.yaml", []),
    "order_pair_network_no_realizer": ("configs/order_pair_network.yaml", ["model.kwargs.realizer_dimension=0"]),
    "order_gps": ("configs/order_gps.yaml", []),
}
BASELINES = ("simple_baseline", "strong_baseline", "strongest_baseline", "exact_test")
ROWS = (*BASELINES, *MODELS)
KEPT = ("test_accuracy", "test_balanced_accuracy", "test_roc_auc", "test_weighted_f1", "test_f1", "per_class_f1",
        "by_kind", "by_defect_size", "num_test", "best_epoch", "stopped_at_epoch", "stop_reason", "stopped_by",
        "wall_time_s")
RIVAL = "strongest_baseline"
PAIRED = ("test_weighted_f1", "test_balanced_accuracy")


def data_settings(args: argparse.Namespace, seed: int) -> list[str]:
    return [f"data.kwargs.path={args.data}", f"data.kwargs.seed={seed}", f"data.kwargs.num_per_kind={args.per_kind}",
            f"data.kwargs.n_min={args.n[0]}", f"data.kwargs.n_max={args.n[1]}"]


def train_row(args: argparse.Namespace, row: str, seed: int) -> dict:
    """One model on one data seed, trained by the CLI in its own process with its own training seed; what its
    summary.json reports, whether the run ended by early stopping or at its epoch cap, and how flat its validation
    loss was when it stopped (:func:`flatness`). With ``--runs`` the run's folder is kept (its ``run_dir``)."""
    config, overrides = MODELS[row]
    with tempfile.TemporaryDirectory(prefix="qg_manifold_like_") as scratch:
        runs = Path(args.runs) if args.runs else Path(scratch)
        name = f"{row}_seed{seed}" if args.runs else "run"
        settings = [*data_settings(args, seed), *overrides, f"training.path={runs}", f"training.run_name={name}",
                    f"training.seed={seed + args.train_seed_offset}", "training.num_workers=0", "training.progress_bar=false",
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
        summary = json.loads((runs / name / "summary.json").read_text())
        flat = flatness(runs / name)
    from QuantumGrav.callbacks.early_stopping import EarlyStopping

    kept = {key: summary.get(key) for key in KEPT}
    ended_by = "early_stopping" if kept["stopped_by"] == EarlyStopping.__qualname__ else "epoch_cap"
    return {**kept, "train_seed": seed + args.train_seed_offset, "epoch_cap": args.epochs, "ended_by": ended_by,
            "seconds": time.perf_counter() - started, "flatness": flat,
            **({"run_dir": str(runs / name)} if args.runs else {})}


def flatness(run_dir: Path) -> dict:
    """Whether validation had flattened when a run stopped, read from the run's own history (metrics.csv, its
    config's early-stopping rule, summary.json): the validation loss at the best epoch (that epoch's own value and
    the windowed mean early stopping compared), the change of the windowed validation loss over the last
    ``patience`` epochs before the stop (stop minus ``patience`` epochs earlier; >= 0: no progress left), its
    smallest and largest value over those epochs, and the learning rate at the stop beside the initial one."""
    import csv

    import numpy as np
    import yaml

    with open(run_dir / "metrics.csv", newline="") as handle:
        history = {int(line["epoch"]): line for line in csv.DictReader(handle)}
    loader = type("Loader", (yaml.SafeLoader,), {})  # the run's config names Python objects: read past their tags
    loader.add_multi_constructor("!", lambda load, suffix, node: None)
    rule = yaml.load((run_dir / "config.yaml").read_text(), Loader=loader)["early_stopping"]
    patience, window = int(rule["patience"]), int(rule.get("window", 1))
    epochs = sorted(history)
    val = np.array([float(history[epoch]["val_loss"]) for epoch in epochs])
    windowed = dict(zip(epochs, (val[max(0, i - window + 1):i + 1].mean() for i in range(len(val)))))
    stop, best = epochs[-1], json.loads((run_dir / "summary.json").read_text()).get("best_epoch")
    last = [windowed[epoch] for epoch in epochs if stop - patience <= epoch <= stop]
    return {"patience": patience, "window": window, "best_epoch": best, "stopped_at_epoch": stop,
            "val_loss_at_best": float(history[best]["val_loss"]) if best in history else None,
            "windowed_val_loss_at_best": float(windowed[best]) if best in windowed else None,
            "windowed_val_loss_at_stop": float(windowed[stop]),
            "windowed_val_loss_change_over_patience": float(windowed[stop] - last[0]),
            "windowed_val_loss_range_over_patience": [float(min(last)), float(max(last))],
            "lr_at_start": float(history[epochs[0]]["lr"]), "lr_at_stop": float(history[stop]["lr"])}


def baseline_rows(args: argparse.Namespace, seed: int) -> dict[str, dict]:
    """The baselines, the strongest rival and the exact 2D-order test alone on the split that the runs of ``seed``
    use, with the recall per kind (on all test sets and on those a model can call) and per defect size; and the
    ceiling of the test split (``analyses.ceiling``) as the row ``ceiling``."""
    import numpy as np

    import QuantumGrav as QG
    from QuantumGrav.data.dataset import split_indices
    from QuantumGrav.data.derived_invariants import causal_matrix_of_edges
    from QuantumGrav.evaluation.baselines import predict_baselines, score_baselines
    from QuantumGrav.analyses.ceiling import callable_sets, ceiling_counts, exact_test_predictions
    from QuantumGrav.analyses.kind_breakdown import kind_breakdown
    from QuantumGrav.evaluation.scores import classification_metrics

    config = QG.load_config(REPO / "configs" / "manifold_like.yaml", data_settings(args, seed))
    dataset = config["data"]["type"](**config["data"]["kwargs"])
    train, _, test = split_indices(len(dataset), config["data"]["split"], config["data"]["split_seed"])
    features = config["testing"]["strong_baseline"]
    baseline_test = predict_baselines(dataset, train, test, "classifier", features, strongest=True)
    truth, predictions = baseline_test.truth, dict(baseline_test.predictions)
    scores = score_baselines("classifier", truth, predictions, dataset.num_classes, features,
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


def recall_of(run: dict, key: str) -> dict:
    """A row's recall per kind: a baseline row keeps it under its own name, a model row under ``gnn`` (the name
    every training run gives its model, whichever config it came from)."""
    return run[key][run["row"] if run["row"] in BASELINES else "gnn"]


def print_recall(runs: list[dict], key: str, title: str) -> None:
    """Each row's recall per kind under ``key`` (``by_kind`` or ``by_kind_changed``), the mean over seeds."""
    rows = [run for run in runs if run["row"] in ROWS and run.get(key)]
    if not rows:
        return
    kinds = sorted({kind for run in rows for kind in recall_of(run, key)})
    print(f"\n{title}\n\n| row | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
    for row in ROWS:
        done = [recall_of(run, key) for run in rows if run["row"] == row]
        if done:
            print(f"| {row} | " + " | ".join(f"{statistics.mean(d[k]['recall'] for d in done if k in d):.3f}"
                                               for k in kinds) + " |")


def print_paired(runs: list[dict]) -> None:
    """Each model row against the strongest rival, paired by data seed (only seeds where both rows exist): the
    differences per seed, their mean +- sd, a paired t-test and the Wilcoxon signed-rank test; and how each model
    run ended (best epoch, stopped-at epoch, cap)."""
    from scipy import stats

    rival = {run["seed"]: run for run in runs if run["row"] == RIVAL}
    for row in MODELS:
        pairs = sorted((run["seed"], run, rival[run["seed"]]) for run in runs
                       if run["row"] == row and run["seed"] in rival)
        if not pairs:
            continue
        print(f"\n{row} minus {RIVAL}, paired by data seed\n\n| data seed | train seed | ended by | best / stopped / cap "
              "| " + " | ".join(f"{key[5:]} {row} | {key[5:]} rival | difference" for key in PAIRED) + " |\n"
              "|---|---|---|---|" + "---|---|---|" * len(PAIRED))
        for seed, run, other in pairs:
            epochs = f"{run.get('best_epoch')} / {run.get('stopped_at_epoch')} / {run.get('epoch_cap', '?')}"
            print(f"| {seed} | {run.get('train_seed', seed)} | {run.get('ended_by', 'not recorded')} | {epochs} | "
                  + " | ".join(paired_cells(run, other, k) for k in PAIRED) + " |")
        for key in PAIRED:
            pairs = [(seed, run, other) for seed, run, other in pairs if run.get(key) is not None]
            differences = [run[key] - other[key] for _, run, other in pairs]
            if not differences:
                continue
            line = f"{key[5:]}: {row} - {RIVAL} = {spread(differences)} over {len(differences)} seed(s)"
            if len(differences) >= 2:
                t_p = stats.ttest_rel([r[key] for _, r, _ in pairs], [o[key] for _, _, o in pairs]).pvalue
                w_p = stats.wilcoxon(differences).pvalue
                line += f"; paired t-test p = {t_p:.3g}; Wilcoxon signed-rank p = {w_p:.3g}"
            print(line)
        print_flatness(row, [run for _, run, _ in pairs])


def paired_cells(run: dict, other: dict, key: str) -> str:
    """A model run's metric, the rival's and their difference; a run from before the study recorded the metric
    (the earlier study's rows have no balanced accuracy) says so."""
    if run.get(key) is None:
        return f"not recorded | {other[key]:.3f} | "
    return f"{run[key]:.3f} | {other[key]:.3f} | {run[key] - other[key]:+.3f}"


def print_flatness(row: str, runs: list[dict]) -> None:
    """How flat each run's validation loss was when it stopped (a row's ``flatness``, :func:`flatness`); rows run
    before the study recorded it say so. When early stopping ended a run, the first of its last ``patience``
    epochs is the best window, so the change over them is >= 0 by construction: its size (and the highest window
    over them, as a share above the best) says how flat the loss had become."""
    print(f"\n{row}: validation loss when the run stopped (windowed: the mean early stopping compares)\n\n"
          "| data seed | best / stopped | val loss at best | windowed at best | windowed at stop | windowed change over "
          "the last patience epochs | highest window over them, above the best | learning rate at stop / start |\n"
          "|---|---|---|---|---|---|---|---|")
    for run in runs:
        flat = run.get("flatness")
        if not flat:
            print(f"| {run['seed']} | {run.get('best_epoch')} / {run.get('stopped_at_epoch')} | "
                  + " | ".join(["not recorded"] * 6) + " |")
            continue
        best = flat["windowed_val_loss_at_best"]
        print(f"| {run['seed']} | {flat['best_epoch']} / {flat['stopped_at_epoch']} | {flat['val_loss_at_best']:.4f} | "
              f"{best:.4f} | {flat['windowed_val_loss_at_stop']:.4f} | "
              f"{flat['windowed_val_loss_change_over_patience']:+.4f} over {flat['patience']} | "
              f"{100 * (flat['windowed_val_loss_range_over_patience'][1] / best - 1):+.1f} % | "
              f"{flat['lr_at_stop']:.3g} / {flat['lr_at_start']:.3g} |")


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
    print_paired(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--per-kind", type=int, default=1000, help="sets of each kind (default: %(default)s)")
    parser.add_argument("--n", type=int, nargs=2, default=[64, 128], help="N range (default: QuantumGrav.jl's)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--train-seed-offset", type=int, default=1000,
                        help="a model's training seed is its data seed plus this (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--data", default=str(REPO / "data" / "kinds"), help="where the stores are written")
    parser.add_argument("--runs", help="keep each model run's folder here as <row>_seed<seed> (default: a temporary "
                        "folder, removed); --backfill-flatness reads them again")
    study_results.add_arguments(parser, "row")
    args = parser.parse_args()
    if args.results:
        print_tables(study_results.load(args.results)[1])
        return 0
    path, results = study_results.load(args.json)
    results["setup"] = (f"{args.per_kind} sets per kind, N {args.n[0]}..{args.n[1]}, split [0.7, 0.15, 0.15], "
                        f"up to {args.epochs} epochs (a row's epoch_cap), training seed = data seed + "
                        f"{args.train_seed_offset} (a row's train_seed), {args.threads} torch thread(s) per run, CPU")
    done = {(run["row"], run["seed"]) for run in results["runs"]}
    for seed in args.seeds:
        if any(row in BASELINES and (row, seed) not in done for row in args.rows):
            for row, result in baseline_rows(args, seed).items():
                if (row in args.rows or row == "ceiling") and (row, seed) not in done:
                    results["runs"].append({"row": row, "seed": seed, **result})
            study_results.save(path, results)
    for row in (row for row in args.rows if row in MODELS):
        for seed in args.seeds:
            if (row, seed) in done:
                continue
            results["runs"].append({"row": row, "seed": seed, **train_row(args, row, seed)})
            study_results.save(path, results)
            print(f"{row} seed {seed}: weighted F1 {results['runs'][-1]['test_weighted_f1']:.3f}", flush=True)
    print_tables(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
