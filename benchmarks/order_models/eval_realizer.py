#!/usr/bin/env python3
"""The realizer head's residual as a per-set feature: how well a trained model's soft-order residual (the realizer's
loss and its share of wrong pairs, ``QuantumGrav.models.realizer``) tells the 2D orders from the other sets of its
run's test split, beside the exact test (``data.order_dimension``) it is a learned, any-d cousin of.

    python benchmarks/order_models/eval_realizer.py --run benchmark_runs/n64_128/order_pair_network_seed1 \
        --json benchmarks/order_models/results_realizer.json

Per test set: the realizer's two features as the head reads them, whether the set is a 2D order (the exact test),
its kind and label. Reported: the ROC-AUC of each feature (lower residual: more 2D) for "is a 2D order" and for
"manifold-like", and the mean of each per kind. Runs are appended to ``--json`` by their run folder. A benchmark,
not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))

import study_results  # noqa: E402


def residuals(run_dir: Path) -> list[dict]:
    """Per test set of the run: its realizer features, exact-test bit, kind and label."""
    import torch
    from torch_geometric.loader import DataLoader

    import QuantumGrav as QG
    from QuantumGrav.data.dataset import split_indices
    from QuantumGrav.data.derived_invariants import causal_matrix_of_edges
    from QuantumGrav.data.order_dimension import is_two_dimensional

    torch.set_num_threads(1)
    applied = QG.load_run(run_dir)
    model, data_cfg = applied.model, applied.config["data"]
    if getattr(model, "realizer", None) is None:
        raise SystemExit(f"{run_dir}: its model has no realizer head (model.kwargs.realizer_dimension is 0)")
    dataset = data_cfg["type"](**data_cfg["kwargs"])
    _, _, test = split_indices(len(dataset), data_cfg["split"], data_cfg["split_seed"])
    captured: list[torch.Tensor] = []
    model.realizer.register_forward_hook(lambda module, inputs, output: captured.append(output[0]))
    items = [dataset[i] for i in test]
    with torch.no_grad():
        for batch in DataLoader(items, batch_size=32):
            model(batch)
    features = torch.cat(captured).tolist()
    return [{"kind": dataset.describe(i)["kind"], "manifold_like": int(item.y.reshape(-1)[0]),
             "two_dimensional": bool(is_two_dimensional(causal_matrix_of_edges(item.edge_index, int(item.num_nodes)))),
             "log_soft_order_loss": f[0], "wrong_pair_share": f[1]} for i, item, f in zip(test, items, features)]


def summary(sets: list[dict]) -> dict:
    from sklearn.metrics import roc_auc_score

    out = {}
    for feature in ("log_soft_order_loss", "wrong_pair_share"):
        score = [-s[feature] for s in sets]  # a lower residual says "more 2D"
        out[feature] = {"auc_two_dimensional": roc_auc_score([s["two_dimensional"] for s in sets], score),
                        "auc_manifold_like": roc_auc_score([s["manifold_like"] for s in sets], score),
                        "mean_by_kind": {kind: statistics.mean(s[feature] for s in sets if s["kind"] == kind)
                                         for kind in sorted({s["kind"] for s in sets})}}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run folder kept by study_manifold_like.py --runs")
    study_results.add_arguments(parser, "run")
    args = parser.parse_args()
    if args.results:
        for run in study_results.load(args.results)[1]["runs"]:
            print(run["run"], {k: {m: round(v, 3) for m, v in s.items() if m.startswith("auc")}
                               for k, s in run["summary"].items()})
        return 0
    path, results = study_results.load(args.json)
    sets = residuals(Path(args.run))
    results["runs"] = [r for r in results["runs"] if r["run"] != os.path.basename(args.run.rstrip("/"))]
    results["runs"].append({"run": os.path.basename(args.run.rstrip("/")), "summary": summary(sets), "sets": sets})
    study_results.save(path, results)
    print(results["runs"][-1]["summary"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
