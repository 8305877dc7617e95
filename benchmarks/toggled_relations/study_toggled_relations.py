"""The relation task measured: configs/toggled_relations.yaml on destroyed sets of exactly N elements with exactly k
changed relations (k in 1, 2, 4, 8, 16, in turn), trained on one process and one thread, with the rivals (the best
single rule, boosted trees on per-pair features and the 2D repair) scored on the same test split, per k. Writes
benchmarks/toggled_relations/results_toggled_relations.json: the command, the wall time of the data and of the run, and the run's
summary (the GNN's test metrics at the config's threshold, the rivals', and by_changed_relations); then, as the
rivals' thresholds are fitted (on the training split, for the best F1), the GNN's threshold fitted on the validation
split for its best F1 and its test metrics there, per k too (``tuned_threshold``).

With ``--rivals-only`` no GNN is trained: for each data seed of ``--seeds`` the rivals alone are fitted and scored on
the split a run would use (the rule, boosted trees on every per-pair feature, the trees on the features without the
2D test's violations, and the 2D repair), per k with counts, beside the ceiling of any exact 2D method: the
share of test sets that are still 2D orders, where it can locate nothing, and the share of the changed pairs whose
ends share a violating part (``ceiling``). Writes benchmarks/toggled_relations/results_toggled_relations_2d.json.

    OMP_NUM_THREADS=1 python benchmarks/toggled_relations/study_toggled_relations.py --n 256 --sets 600 --epochs 8
    OMP_NUM_THREADS=1 python benchmarks/toggled_relations/study_toggled_relations.py --rivals-only --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study

import study_results  # noqa: E402  (benchmarks/study_results.py: written whole and atomically)

KEPT = ("stop_reason", "stopped_at_epoch", "best_epoch", "wall_time_s", "num_test", "num_test_pairs",
        "num_test_changed_sets", "num_test_unchanged_sets_marked", "confusion_matrix", "rival_rule", "trees_rival",
        "repair_rival", "by_changed_relations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="elements per set")
    parser.add_argument("--sets", type=int, default=600, help="destroyed sets in all")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    parser.add_argument("--work", default="/tmp/qg_toggled_relations", help="folder for the stores and the run")
    parser.add_argument("--out", default=None, help="results file (default benchmarks/toggled_relations/results_toggled_relations"
                                                     ".json, or results_toggled_relations_2d.json for --rivals-only)")
    parser.add_argument("--rivals-only", action="store_true", help="no GNN: the rivals and the ceiling per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="data seeds (--rivals-only)")
    args = parser.parse_args()
    if args.rivals_only:
        rivals_only(args)
        return
    args.out = args.out or str(REPO / "benchmarks" / "toggled_relations" / "results_toggled_relations.json")
    settings = settings_of(args, args.seed)
    overrides = [item for key, value in settings.items() for item in ("--set", f"{key}={value}")]
    env = {**os.environ, "PYTHONPATH": str(REPO / "QuantumGravPy" / "src")}
    config = str(REPO / "configs" / "toggled_relations.yaml")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "QuantumGrav", "generate", "--config", config, *overrides], check=True,
                   env=env)
    generated = time.perf_counter() - started
    subprocess.run([sys.executable, "-m", "QuantumGrav", "train", "--config", config, *overrides], check=True, env=env)
    total = time.perf_counter() - started
    summary = json.loads((Path(args.work) / "runs" / settings["training.run_name"] / "summary.json").read_text())
    metrics = {key: value for key, value in summary.items() if key.startswith(("test_", "rival_", "trees_", "repair_"))}
    result = {"command": "OMP_NUM_THREADS=1 python benchmarks/toggled_relations/study_toggled_relations.py " + " ".join(sys.argv[1:]),
              "setup": f"{args.sets} destroyed sets of {args.n} elements, k changed relations in turn from 1, 2, 4, 8, "
                       f"16 (data seed {args.seed}), split [0.7, 0.15, 0.15], one process, "
                       f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, CPU",
              "generation_wall_s": round(generated, 1), "total_wall_s": round(total, 1),
              **metrics, **{key: summary[key] for key in KEPT if key in summary}}
    result["tuned_threshold"] = tuned_threshold(Path(args.work) / "runs" / settings["training.run_name"], args.work)
    study_results.save(Path(args.out), result)
    print(f"wrote {args.out}")


def settings_of(args: argparse.Namespace, seed: int) -> dict:
    """The config overrides of one data seed's stores and run."""
    return {"data.kwargs.path": f"{args.work}/kinds", "data.kwargs.num_per_kind": args.sets,
            "data.kwargs.n_min": args.n, "data.kwargs.n_max": args.n, "data.kwargs.seed": seed,
            "data.kwargs.workers": 1,
            "training.num_epochs": args.epochs, "training.num_workers": 0, "training.path": f"{args.work}/runs",
            "training.run_name": f"n{args.n}_seed{seed}", "training.progress_bar": False, "training.figures": False}


def rivals_only(args: argparse.Namespace) -> None:
    """The rivals and the 2D ceiling on each seed's split (the module's docstring)."""
    sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))
    import QuantumGrav as QG
    from QuantumGrav.analyses.relation_rival import by_changed_relations
    from QuantumGrav.analyses import dimension_repair, relation_rival

    without = [name for name in relation_rival.PAIR_FEATURES if not name.startswith("violation_")]
    runs = []
    for seed in args.seeds:
        started = time.perf_counter()
        scratch = tempfile.mkdtemp(dir=args.work)  # the run directory a Trainer opens: nothing is trained in it
        trainer = QG.Trainer(QG.load_config(REPO / "configs" / "toggled_relations.yaml",
                                            {**settings_of(args, seed), "training.path": scratch}))
        dataset, split, task = trainer.state.dataset, trainer.split, trainer.task
        loaded = time.perf_counter()
        rows = relation_rival.training_rows([dataset[i] for i in split["train"]])
        rule = relation_rival.fit_rule(rows)
        predictors = {"rival": rule.predict, "trees": relation_rival.fit_trees(rows),
                      "trees_without_violations": relation_rival.fit_trees(rows, without)}
        fitted = time.perf_counter()
        test = [dataset[i] for i in split["test"]]
        # The repair once per test set: its marks are scored, its cost read again by the ceiling.
        begun = time.perf_counter()
        repairs = {id(item): dimension_repair.repair(relation_rival.relation_of(item)) for item in test}
        repairing = time.perf_counter() - begun
        predictors["repair"] = lambda item: dimension_repair.pair_marks(repairs[id(item)])
        per_set, wall = {}, {}
        for name, predict in predictors.items():
            begun = time.perf_counter()
            per_set[name] = relation_rival.rival_totals(predict, test, task)
            wall[name] = round(time.perf_counter() - begun, 1)
        wall["repair"] = round(wall["repair"] + repairing, 1)
        sizes = [dataset.describe(i).get("changed_relations") for i in split["test"]]
        trainer.close()
        shutil.rmtree(scratch)
        runs.append({"seed": seed, "num_test": len(test), "rival_rule": rule.describe(),
                     **{f"{name}_{metric}": value for name, totals in per_set.items()
                        for metric, value in relation_rival.rival_metrics(totals, task).items()},
                     "by_changed_relations": by_changed_relations(sizes, per_set, task),
                     "ceiling": ceiling(test, sizes, [repairs[id(item)] for item in test]),
                     "wall_s": {"data": round(loaded - started, 1), "features_and_fit": round(fitted - loaded, 1),
                                "test": wall}})
        print(f"seed {seed}: " + ", ".join(f"{name} F1 {runs[-1][name + '_f1']:.3f}" for name in per_set), flush=True)
    result = {"command": "OMP_NUM_THREADS=1 python benchmarks/toggled_relations/study_toggled_relations.py " + " ".join(sys.argv[1:]),
              "setup": f"{args.sets} destroyed sets of {args.n} elements in 2D per data seed, k changed relations in "
                       f"turn from 1, 2, 4, 8, 16, split [0.7, 0.15, 0.15]; rivals fitted on the training split, "
                       f"scored on the test split; no GNN; one process, "
                       f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, CPU",
              "trees_rival": relation_rival.TREES_DESCRIPTION, "repair_rival": dimension_repair.REPAIR_DESCRIPTION,
              "repair_bounds": {"max_sweeps": dimension_repair.MAX_SWEEPS},
              "runs": runs}
    out = Path(args.out or REPO / "benchmarks" / "toggled_relations" / "results_toggled_relations_2d.json")
    study_results.save(out, result)
    print(f"wrote {out}")


def ceiling(test: list, sizes: list, repairs: list) -> dict:
    """Per k: the test sets, those still 2D orders (no exact 2D method locates anything there), those for which the
    repair (``repairs``, one per test set) found a 2D order that needs fewer toggles than the sprinkling's own
    (``cheaper_explanation``: no method that takes the simplest explanation locates all their changes) or as few and
    marks other pairs (``other_equal_explanation``), the changed pairs, those that are edges of a violating cycle
    (their ends share a violating part), and those with both ends on a violation."""
    from QuantumGrav.tasks.levels import candidate_pairs
    from QuantumGrav.analyses.dimension_repair import explanation_cost
    from QuantumGrav.analyses.relation_rival import PAIR_FEATURES, pair_features, relation_of

    found: dict = {}
    for item, k, fitted in zip(test, sizes, repairs):
        features, changed = pair_features(item), item.y.numpy() > 0.5
        ends, cycle = (features[:, PAIR_FEATURES.index(name)] for name in ("violation_ends", "violation_cycle"))
        row = found.setdefault(str(k), {"sets": 0, "still_2d_sets": 0, "cheaper_explanation": 0,
                                        "other_equal_explanation": 0, "changed_pairs": 0, "changed_on_cycle": 0,
                                        "changed_both_ends": 0, "candidate_pairs": 0})
        row["sets"] += 1
        row["still_2d_sets"] += int(not ends.any())
        R, toggled = relation_of(item), np.zeros((int(item.num_nodes),) * 2, dtype=bool)
        toggled[tuple(candidate_pairs(int(item.num_nodes)).numpy())] = changed
        own = explanation_cost(R, R ^ toggled)
        row["cheaper_explanation"] += int(fitted.cost < own)
        row["other_equal_explanation"] += int(fitted.cost == own and not np.array_equal(fitted.changed, toggled))
        row["changed_pairs"] += int(changed.sum())
        row["changed_on_cycle"] += int((changed & (cycle > 0)).sum())
        row["changed_both_ends"] += int((changed & (ends == 2)).sum())
        row["candidate_pairs"] += int((cycle > 0).sum())
    for row in found.values():
        row["still_2d_share"] = row["still_2d_sets"] / row["sets"]
        row["cheaper_explanation_share"] = row["cheaper_explanation"] / row["sets"]
        row["changed_on_cycle_share"] = row["changed_on_cycle"] / max(row["changed_pairs"], 1)
        row["changed_both_ends_share"] = row["changed_both_ends"] / max(row["changed_pairs"], 1)
    return dict(sorted(found.items(), key=lambda item: int(item[0])))


def tuned_threshold(run_dir: Path, work: str) -> dict:
    """The run's best weights scored on its validation split: the threshold of the pairs' best F1 there (as the
    rivals' are fitted on theirs), and the test metrics at it, all sets and per k."""
    sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))
    import QuantumGrav as QG
    from QuantumGrav.analyses.relation_rival import by_changed_relations
    from QuantumGrav.analyses.node_rival import best_threshold
    from QuantumGrav.tasks.relation import RelationBinaryTask

    config = QG.load_config(run_dir / "config.yaml", {"training.path": f"{work}/threshold_runs",
                                                      "training.num_epochs": 1, "training.figures": False})
    trainer = QG.Trainer(config)
    trainer.core_model.load_state_dict(torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["model"])
    _, val_loader, test_loader = trainer.prepare_dataloaders()
    level = trainer.task.level

    def scored(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:  # (probabilities, labels) per set
        found = []
        for outputs, target, batch in trainer.evaluator.outputs(loader):
            graphs = level.row_graphs(batch)
            found += [(torch.sigmoid(outputs.view(-1)[graphs == g]), target.view(-1)[graphs == g])
                      for g in range(batch.num_graphs)]
        return found

    val = scored(val_loader)
    threshold, val_f1 = best_threshold(torch.cat([p for p, _ in val]).double().numpy(),
                                       torch.cat([y for _, y in val]).numpy() > 0.5)
    task = RelationBinaryTask(min(max(threshold, 1e-12), 1.0), trainer.task.class_names)
    per_set = [task.batch_totals(torch.logit(p.double()).view(-1, 1), y.view(-1, 1), torch.zeros(()))
               for p, y in scored(test_loader)]
    order = [trainer.split["test"][i] for batch in test_loader.batch_sampler for i in batch]
    sizes = [trainer.state.dataset.describe(i).get("changed_relations") for i in order]
    metrics = task.metrics(sum(per_set, task.zero_totals(torch.device("cpu"))))
    trainer.close()
    return {"threshold": float(np.float64(threshold)), "val_f1": val_f1,
            **{f"test_{name}": metrics[name] for name in ("f1", "precision", "recall", "all_found", "exact")},
            "by_changed_relations": by_changed_relations(sizes, {"gnn": per_set}, task)}


if __name__ == "__main__":
    main()
