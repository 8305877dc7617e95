#!/usr/bin/env python3
"""Sensitivity curves on the field's axes (issue 49, item 3): the detection rate of a defect of exactly k changed
relations (destroyed sets) or of an inserted block of exactly m elements (merged sets) at a false-alarm rate of 5 %
on the manifold-like (polynomial) sets of the same N and dimension d, per model, over data seeds.

    python benchmarks/sensitivity/study_sensitivity.py --n 256 --dimensions 2 3 4 --seeds 1 2 3 --json benchmarks/sensitivity/results_sensitivity.json
    python benchmarks/sensitivity/study_sensitivity.py --n 1024 --per-kind 360 --dimensions 3 --json benchmarks/sensitivity/results_sensitivity.json
    python benchmarks/sensitivity/study_sensitivity.py --rows gnn --n 256 --dimensions 3 --seeds 1 --json ...
    python benchmarks/sensitivity/study_sensitivity.py --results benchmarks/sensitivity/results_sensitivity.json   # the tables only
    python benchmarks/sensitivity/study_sensitivity.py --rows strongest_baseline gnn --n 1024 --per-kind 270 --dimensions 4 \
        --changed-relations 16 32 64 128 256 512 1024 2048 4096 8192 16384 --json benchmarks/sensitivity/results_sensitivity_large_defects.json
    python benchmarks/sensitivity/study_sensitivity.py --generation-sets 18 --n 1024 --json ...   # what generating a set costs

The data of each (N, d, data seed): ``KindsDataset`` with kinds polynomial, destroyed and merged, ``--per-kind`` sets
of each with exactly N elements, the destroyed sets taking k = 1, 2, 4, ..., 256 changed relations in turn and the
merged sets blocks of m = 4, 8, ..., 64 elements (``data.kwargs.changed_relations`` and ``block_sizes``), split by
``split_indices`` (``--split``, seed 42). Target: manifold-like (polynomial) or not. Rows:

* ``strongest_baseline``: the strongest rival (``evaluation.baselines``: gradient boosting on the order invariants,
  the per-element feature distributions, the exact 2D-order test and the graph observables), fitted on the training
  split; its score is the probability of *not* manifold-like;
* ``exact_test`` (d = 2 only): a set is detected when it is not a 2D order (``data.order_dimension``); nothing is
  chosen, its false-alarm rate is measured;
* ``gnn``: the default model trained by the CLI (``configs/manifold_like_dimensions.yaml`` with the same data
  settings, ``--epochs`` at most), applied to every set (``QG.load_run(...).predict``); its score is one minus its
  probability of manifold-like.

A scored row's threshold is the one at which 5 % of the validation split's polynomial sets would be called defects
(``analyses.sensitivity.threshold_at_false_alarm``); the rate realised on the test split's polynomial sets is
reported with its Wilson interval, and the detection rate per k and m on the test split with counts and intervals,
and the smallest k (m) detected at 90 %: the crossing of that curve, with the crossings of its Wilson bounds as its
interval (``analyses.sensitivity``). ``pooled`` sums the counts over the seeds of each (row, N, d). Each row also
records what it cost (``costs``: generating the sets and writing the stores, reading them with their node features,
the rival's features, fitting, per set where per set). Results are written after every row; a row already in
``--json`` is not run again (a stopped study continues). One process, ``--threads`` torch threads. A benchmark, not
a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))

import study_results  # noqa: E402  (benchmarks/study_results.py: the --json results file)

KINDS = ("polynomial", "destroyed", "merged")
NULL_KIND = "polynomial"
SIZE_OF = {"destroyed": "changed_relations", "merged": "block_size"}  # each defect kind's realised size in describe(i)
CHANGED_RELATIONS = [2 ** b for b in range(9)]  # 1 .. 256
BLOCK_SIZES = [4, 8, 16, 32, 64]
ROWS = ("strongest_baseline", "exact_test", "gnn")
CONFIG = "configs/manifold_like_dimensions.yaml"
SPLIT_SEED = 42


class Clock:
    """Wall and CPU seconds since it started: this process's CPU, and its finished children's (the CLI's training
    runs), so that a cost read on a machine shared with other jobs is not only the wait for a core."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), self._cpu()

    @staticmethod
    def _cpu() -> float:
        import resource

        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    def seconds(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, self._cpu() - self.cpu


def per_set(name: str, seconds: tuple[float, float] | None, sets: int) -> dict:
    """``<name>_s_per_set`` (wall) and ``<name>_cpu_s_per_set``; None for a step not timed."""
    if seconds is None:
        return {f"{name}_s_per_set": None, f"{name}_cpu_s_per_set": None}
    return {f"{name}_s_per_set": seconds[0] / sets, f"{name}_cpu_s_per_set": seconds[1] / sets}


def machine() -> str:
    """Where the GNN trains: the GPU's name when the config's device: auto finds one, else the CPU's cores."""
    import torch

    from QuantumGrav.common.processes import usable_cpu_count

    cores = f"{usable_cpu_count()} cores"
    return f"{torch.cuda.get_device_name(0)} ({cores})" if torch.cuda.is_available() else f"CPU ({cores})"


def data_kwargs(args: argparse.Namespace, n: int, dimension: int, seed: int) -> dict:
    return {"path": str(args.data), "kinds": list(KINDS), "num_per_kind": args.per_kind, "n_min": n, "n_max": n,
            "seed": seed, "dimension": dimension, "changed_relations": args.changed_relations, "block_sizes": BLOCK_SIZES}


def open_data(args: argparse.Namespace, n: int, dimension: int, seed: int):
    """The sets of (n, dimension, seed), generated if not there yet, with the seconds generation took (None when
    they were already there), and the split."""
    from QuantumGrav.data.dataset import split_indices
    from QuantumGrav.data.kinds.dataset import (GENERATION_FILE, KindsDataset, generated_folder,
                                                generation_settings)

    kwargs = data_kwargs(args, n, dimension, seed)
    settings = generation_settings(kwargs["kinds"], args.per_kind, n, n, seed, dimension, args.changed_relations,
                                   BLOCK_SIZES)
    there = (generated_folder(args.data, settings) / GENERATION_FILE).is_file()
    clock = Clock()
    dataset = KindsDataset(**kwargs, workers=args.workers)  # the same sets whatever the workers
    generation = None if there else clock.seconds()
    return dataset, generation, split_indices(len(dataset), args.split, SPLIT_SEED)


def sensitivity_of(scores, kinds, sizes, val, test, changed_relations, threshold=None) -> dict:
    """A scored row's sensitivity: the threshold (chosen on the validation split's null sets unless given), the
    false-alarm rate realised on the validation and test null sets, and the detection curve of each defect kind on
    the test split."""
    import numpy as np

    from QuantumGrav.analyses.sensitivity import detection_curve, false_alarms, threshold_at_false_alarm

    scores, kinds, sizes = np.asarray(scores, dtype=float), np.asarray(kinds), np.asarray(sizes, dtype=float)
    null_val = [i for i in val if kinds[i] == NULL_KIND]
    null_test = [i for i in test if kinds[i] == NULL_KIND]
    chosen = threshold is None
    if chosen:
        threshold = threshold_at_false_alarm(scores[null_val])
    curves = {}
    for kind, drawn in (("destroyed", changed_relations), ("merged", BLOCK_SIZES)):
        members = [i for i in test if kinds[i] == kind]
        curves[kind] = detection_curve(sizes[members], scores[members] > threshold, drawn_sizes=drawn)
    return {"threshold": float(threshold), "threshold_chosen_on": "validation polynomial sets" if chosen else "fixed",
            "false_alarm_validation": false_alarms(scores[null_val], threshold),
            "false_alarm_test": false_alarms(scores[null_test], threshold), "curves": curves}


def split_counts(kinds, parts) -> dict:
    return {name: {kind: sum(1 for i in part if kinds[i] == kind) for kind in KINDS}
            for name, part in zip(("train", "validation", "test"), parts)}


def rival_rows(args: argparse.Namespace, n: int, dimension: int, seed: int) -> dict[str, dict]:
    """The strongest rival (and in d = 2 the exact test) on the sets of (n, dimension, seed), with what each step
    cost."""
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from QuantumGrav.data.causal_sets import INVARIANT_NAMES
    from QuantumGrav.evaluation.baselines import (STRONGEST_FEATURE_NAMES, baseline_features, baseline_models,
                                                  element_statistic_names, labels_vector)

    dataset, generation, (train, val, test) = open_data(args, n, dimension, seed)
    descriptions = [dataset.describe(i) for i in range(len(dataset))]
    kinds = [d["kind"] for d in descriptions]
    sizes = [d.get(SIZE_OF.get(d["kind"], ""), 0) for d in descriptions]
    clock = Clock()
    items = [dataset[i] for i in range(len(dataset))]
    read, clock = clock.seconds(), Clock()
    X = baseline_features(items, "invariants_and_elements", strongest=True)
    features = clock.seconds()
    y = labels_vector(items).astype(np.int64)
    estimator, columns, method = baseline_models("classifier", "invariants_and_elements", True)["strongest"]
    clock = Clock()
    with threadpool_limits(limits=1):
        estimator.fit(X[train][:, columns], y[train])
        fit = clock.seconds()
        defect_class = list(estimator.classes_).index(0)  # y = 1: manifold-like
        scores = estimator.predict_proba(X[:, columns])[:, defect_class]
    costs = {"sets": len(dataset), "torch_threads": torch.get_num_threads(), **per_set("generation", generation, len(dataset)),
             "generation_note": None if generation is not None else "the stores were already there (not timed)",
             "generation_workers": args.workers,
             **per_set("read_with_node_features", read, len(dataset)), **per_set("rival_features", features, len(dataset)),
             "rival_fit_s": fit[0], "rival_fit_cpu_s": fit[1], "train_sets": len(train)}
    common = {"num_per_kind": args.per_kind, "split": list(args.split), "split_seed": SPLIT_SEED,
              "counts": split_counts(kinds, (train, val, test))}
    rows = {"strongest_baseline": {**common, "method": method, "costs": costs,
                                   **sensitivity_of(scores, kinds, sizes, val, test, args.changed_relations)}}
    if dimension == 2:
        column = [*INVARIANT_NAMES, *element_statistic_names(), *STRONGEST_FEATURE_NAMES].index("is_two_dimensional")
        not_two_dimensional = 1.0 - X[:, column]
        rows["exact_test"] = {**common, "method": "detected iff not a 2D order (data.order_dimension), nothing fitted",
                              **sensitivity_of(not_two_dimensional, kinds, sizes, val, test, args.changed_relations,
                                               threshold=0.5)}
    return rows


def gnn_row(args: argparse.Namespace, n: int, dimension: int, seed: int) -> dict:
    """The default model trained by the CLI on the sets of (n, dimension, seed) and applied to all of them; its
    score is one minus its probability of manifold-like."""
    import numpy as np

    import QuantumGrav as QG

    dataset, _, (train, val, test) = open_data(args, n, dimension, seed)  # generated here if not yet, untimed there
    descriptions = [dataset.describe(i) for i in range(len(dataset))]
    kinds = [d["kind"] for d in descriptions]
    sizes = [d.get(SIZE_OF.get(d["kind"], ""), 0) for d in descriptions]
    kwargs = data_kwargs(args, n, dimension, seed)
    settings = [f"data.kwargs.{key}={json.dumps(value)}" for key, value in kwargs.items()]
    settings += [f"data.split={json.dumps(list(args.split))}", f"data.split_seed={SPLIT_SEED}",
                 f"training.seed={seed + args.train_seed_offset}", "training.num_workers=0",
                 "training.progress_bar=false", "training.figures=false", "testing.baselines=false",
                 f"training.num_epochs={args.epochs}"]
    with tempfile.TemporaryDirectory(prefix="qg_sensitivity_") as runs:
        command = [sys.executable, "-m", "QuantumGrav", "train", "--config", CONFIG,
                   "--set", f"training.path={runs}", "--set", "training.run_name=run"]
        for setting in settings:
            command += ["--set", setting]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "QUANTUMGRAV_SMOKE_TEST": "0",
               "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), os.environ.get("PYTHONPATH", "")])}
        clock = Clock()
        finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
        if finished.returncode != 0:
            raise RuntimeError(f"gnn n={n} d={dimension} seed {seed} failed:\n{finished.stderr[-3000:]}")
        training = clock.seconds()
        run = Path(runs) / "run"
        summary = json.loads((run / "summary.json").read_text())
        clock = Clock()
        predicted = QG.load_run(run).predict(str(run / "config.yaml"))
        applying = clock.seconds()
    score = np.empty(len(dataset))
    for row in predicted:
        score[int(row["set"])] = 1.0 - float(row["score"])
    from QuantumGrav.callbacks.early_stopping import EarlyStopping

    ended_by = "early_stopping" if summary.get("stopped_by") == EarlyStopping.__qualname__ else "epoch_cap"
    return {"num_per_kind": args.per_kind, "split": list(args.split), "split_seed": SPLIT_SEED,
            "counts": split_counts(kinds, (train, val, test)), "config": CONFIG, "train_seed": seed + args.train_seed_offset,
            "epoch_cap": args.epochs, "ended_by": ended_by, "best_epoch": summary.get("best_epoch"),
            "stopped_at_epoch": summary.get("stopped_at_epoch"), "test_balanced_accuracy": summary.get("test_balanced_accuracy"),
            **sensitivity_of(score, kinds, sizes, val, test, args.changed_relations),
            "costs": {"training_s": training[0], "training_cpu_s": training[1], "applying_s": applying[0],
                      "applying_cpu_s": applying[1], "torch_threads": args.threads, "machine": machine()}}


def generation_rows(args: argparse.Namespace, n: int, dimension: int) -> list[dict]:
    """What one set of each kind costs to generate and write as a store with its node features (``KindsDataset``,
    one process), ``--generation-sets`` sets of each kind written afresh into a temporary folder, in wall and CPU
    seconds per set."""
    from QuantumGrav.data.kinds import KindsDataset

    rows = []
    for kind in KINDS:
        sizes = {"changed_relations": args.changed_relations} if kind == "destroyed" else \
            {"block_sizes": BLOCK_SIZES} if kind == "merged" else {}
        with tempfile.TemporaryDirectory(prefix="qg_generation_") as folder:
            clock = Clock()
            KindsDataset(folder, kinds=[kind], num_per_kind=args.generation_sets, n_min=n, n_max=n, seed=0,
                         dimension=dimension, workers=1, **sizes)
            rows.append({"kind": kind, "n": n, "dimension": dimension, "sets": args.generation_sets,
                         **per_set("generation", clock.seconds(), args.generation_sets)})
    return rows


def pooled(runs: list[dict]) -> dict:
    """Per (row, N, d): the seeds, the false alarms and each kind's curve summed over them."""
    from QuantumGrav.analyses.sensitivity import pooled_curve, pooled_false_alarms

    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(f"{run['row']} n={run['n']} d={run['dimension']}", []).append(run)
    return {key: {"seeds": sorted(run["seed"] for run in group),
                  "false_alarm_test": pooled_false_alarms([run["false_alarm_test"] for run in group]),
                  "curves": {kind: pooled_curve([run["curves"][kind] for run in group]) for kind in SIZE_OF}}
            for key, group in sorted(groups.items())}


def crossing_text(curve: dict) -> str:
    from QuantumGrav.evaluation.kinds import describe_threshold

    crossing = curve["threshold_at_90"]
    interval = crossing["interval"]
    return f"{describe_threshold(crossing)} [{describe_threshold(interval['low'])}, {describe_threshold(interval['high'])}]"


def print_tables(results: dict) -> None:
    print(results["setup"])
    print("\n| row | N | d | seed | threshold | false alarms (test) | smallest k at 90 % [interval] "
          "| smallest m at 90 % [interval] |\n|---|---|---|---|---|---|---|---|")
    rows = sorted(results["runs"], key=lambda r: (r["row"], r["n"], r["dimension"], r["seed"]))
    for run in rows:
        alarms = run["false_alarm_test"]
        print(f"| {run['row']} | {run['n']} | {run['dimension']} | {run['seed']} | {run['threshold']:.3g} | "
              f"{alarms['false_alarms']}/{alarms['sets']} ({alarms['rate']:.3f}) | "
              f"{crossing_text(run['curves']['destroyed'])} | {crossing_text(run['curves']['merged'])} |")
    print("\npooled over seeds\n")
    for key, group in results["pooled"].items():
        alarms = group["false_alarm_test"]
        print(f"{key}, seeds {group['seeds']}: false alarms {alarms['false_alarms']}/{alarms['sets']} = "
              f"{alarms['rate']:.3f} [{alarms['rate_low']:.3f}, {alarms['rate_high']:.3f}]")
        for kind, curve in group["curves"].items():
            points = "  ".join(f"{p['size']:g}: {p['correct']}/{p['sets']}" for p in curve["points"])
            print(f"  {kind}: 90 % at {crossing_text(curve)};  {points}")
    print("\ncosts, wall (CPU) seconds\n\n| row | N | d | seed | sets | generation s/set | read s/set "
          "| rival features s/set | fit s | training s |\n|---|---|---|---|---|---|---|---|---|---|")
    for run in rows:
        if "costs" in run:
            c = run["costs"]
            cells = [str(c.get("sets", "-"))]
            for wall, cpu in (("generation_s_per_set", "generation_cpu_s_per_set"),
                              ("read_with_node_features_s_per_set", "read_with_node_features_cpu_s_per_set"),
                              ("rival_features_s_per_set", "rival_features_cpu_s_per_set"),
                              ("rival_fit_s", "rival_fit_cpu_s"), ("training_s", "training_cpu_s")):
                cells.append("-" if c.get(wall) is None else f"{c[wall]:.3g}"
                             + ("" if c.get(cpu) is None else f" ({c[cpu]:.3g})"))
            print(f"| {run['row']} | {run['n']} | {run['dimension']} | {run['seed']} | " + " | ".join(cells) + " |")
    if results.get("generation"):
        print_generation(results["generation"])


def print_generation(rows: list[dict]) -> None:
    print("\ngeneration (sets written with their node features), per set: wall (CPU) seconds\n\n| kind | N | d | sets "
          "| per set |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['kind']} | {row['n']} | {row['dimension']} | {row['sets']} | {row['generation_s_per_set']:.3g} "
              f"({row['generation_cpu_s_per_set']:.3g}) |")


def save(path: Path | None, results: dict) -> None:
    results["pooled"] = pooled(results["runs"])
    study_results.save(path, results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[256], help="element counts, one study each")
    parser.add_argument("--dimensions", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=["strongest_baseline", "exact_test"])
    parser.add_argument("--per-kind", type=int, default=1080, help="sets of each kind (default: %(default)s)")
    parser.add_argument("--split", type=float, nargs=3, default=[0.4, 0.2, 0.4],
                        help="train, validation, test fractions (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=40, help="the GNN's epoch cap")
    parser.add_argument("--changed-relations", type=int, nargs="+", default=CHANGED_RELATIONS,
                        help="the destroyed sets' k, taken in turn (default: %(default)s); a results file holds one list")
    parser.add_argument("--train-seed-offset", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--workers", type=int, default=1,
                        help="processes that generate missing sets (default: %(default)s; the per-set timings "
                             "of --generation-sets always use one)")
    parser.add_argument("--data", type=Path, default=REPO / "data" / "sensitivity", help="where the stores are written")
    parser.add_argument("--generation-sets", type=int, default=0,
                        help="instead of the curves: time generating this many sets of each kind at each N and d")
    study_results.add_arguments(parser, "row")
    args = parser.parse_args()
    if args.results:
        print_tables(study_results.load(args.results)[1])
        return 0
    import torch

    torch.set_num_threads(args.threads)
    path, results = study_results.load(args.json)
    results["setup"] = (f"kinds {', '.join(KINDS)}; destroyed sets with exactly k changed relations, k in "
                        f"{args.changed_relations}; merged sets with blocks of exactly m elements, m in {BLOCK_SIZES}; "
                        f"threshold at 5 % false alarms on the validation polynomial sets; a curve's threshold_at_90 is where it "
                        f"crosses 0.9 detection, its interval where the curves of its points' 95 % Wilson bounds cross "
                        f"it; counts per point are test sets; one process, "
                        f"{args.threads} torch thread(s), {machine()}")
    if args.generation_sets:
        measured = [row for n in args.n for dimension in args.dimensions for row in generation_rows(args, n, dimension)]
        keys = {(row["kind"], row["n"], row["dimension"]) for row in measured}
        results["generation"] = [row for row in results.get("generation", [])
                                 if (row["kind"], row["n"], row["dimension"]) not in keys] + measured
        save(path, results)
        print_generation(results["generation"])
        return 0
    other_lists = {tuple(run.get("changed_relations", CHANGED_RELATIONS)) for run in results["runs"]} - {
        tuple(args.changed_relations)}
    if other_lists:  # its pooled curves would add up points of different studies
        parser.error(f"{args.json} holds runs with destroyed sets of k in {list(other_lists.pop())}, not "
                     f"{args.changed_relations}: write this list's runs to another --json file")
    done = {(run["row"], run["n"], run["dimension"], run["seed"]) for run in results["runs"]}
    for n in args.n:
        for dimension in args.dimensions:
            for seed in args.seeds:
                wanted = [row for row in args.rows if (row, n, dimension, seed) not in done
                          and not (row == "exact_test" and dimension != 2)]
                if {"strongest_baseline", "exact_test"} & set(wanted):
                    for row, result in rival_rows(args, n, dimension, seed).items():
                        if row in wanted:
                            results["runs"].append({"row": row, "n": n, "dimension": dimension, "seed": seed,
                                                    "changed_relations": args.changed_relations, **result})
                    save(path, results)
                    print(f"rivals n={n} d={dimension} seed={seed} done", flush=True)
                if "gnn" in wanted:
                    results["runs"].append({"row": "gnn", "n": n, "dimension": dimension, "seed": seed,
                                            "changed_relations": args.changed_relations,
                                            **gnn_row(args, n, dimension, seed)})
                    save(path, results)
                    print(f"gnn n={n} d={dimension} seed={seed} done", flush=True)
    save(path, results)
    print_tables(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
