"""What a run writes about itself (rank 0): its resolved config.yaml, metrics.csv (a row per epoch),
summary.json, the log's epoch and test lines, and the one-screen summary the CLI prints (with the lines of the
results the analyses add: they compute them, the run's records say them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evaluation.baselines import describe_baselines
from ..config.yaml_io import dump_config
from ..common.logging_utils import get_logger
from ..common.files import atomic_write_text, shown_path

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them
RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", "checkpoints/", "figures/", "logs/")
# How the summary, the log and the figures name each model of a result (the analyses' rows included).
MODEL_LABELS = {"gnn": "GNN", "simple_baseline": "simple baseline", "strong_baseline": "strong baseline",
                "strongest_baseline": "strongest rival", "exact_test": "exact 2D-order test"}


def write_resolved_config(run_dir: Path, config: dict[str, Any], derived: dict[str, Any]) -> None:
    """Rank 0: the run's config.yaml. Without resume and run_name, `--config <run dir>/config.yaml`
    starts the same run anew."""
    repeatable = {**config, "training": {**config["training"], "resume": None, "run_name": None}}
    text = dump_config({**repeatable, "derived": derived})
    header = "# Resolved config of this run. 'derived' is recomputed by the trainer and ignored on load.\n"
    atomic_write_text(run_dir / "config.yaml", header + text)


def summarise_run(result: dict[str, Any]) -> str:
    """The one-screen summary the CLI prints."""
    summary = result.get("summary", {})
    lines = [
        "",
        "=== QuantumGrav run summary ===",
        f"run directory   {shown_path(str(summary.get('run_dir')))}",
        f"stopped         epoch {summary.get('stopped_at_epoch')}: {summary.get('stop_reason')}",
        f"best epoch      {summary.get('best_epoch')}",
    ]
    test = result.get("test") or {}
    if test:
        scores = "  ".join(f"{k.removeprefix('test_')} " + ("undefined" if v is None else f"{v:.3f}")
                           for k, v in test.items() if k.startswith("test_") and k != "test_loss")
        lines.append(f"test            {scores}  (loss {test['test_loss']:.4f}, {test['num_test']} causal sets)")
        lines += describe_baselines(test.get("baselines", {}))
        if "destroyed_by_flip_fraction" in test:
            lines.append(describe_curves(test["destroyed_by_flip_fraction"]))
        if test.get("by_kind"):
            lines.append(describe_recall_by_kind(test["by_kind"], MODEL_LABELS))
        if "rival_rule" in test:
            for label, prefix, how in (("rival rule", "rival", "rival_rule"), ("trees rival", "trees", "trees_rival"),
                                       ("repair rival", "repair", "repair_rival")):
                if how not in test:  # the repair: relation tasks on 2D sets only
                    continue
                per_set = "iou" if f"{prefix}_iou" in test else "all_found"  # node task | relation task
                f1, second = test[f"{prefix}_f1"], test[f"{prefix}_{per_set}"]
                lines.append(f"{label:<15} f1 {f1:.3f}  {per_set} {second:.3f}  ({test[how]})")
        if "train_mean_rmse" in test:
            lines.append(f"train mean      rmse {test['train_mean_rmse']:.3f}  (predicting the training mean)")
    lines += [f"note            {note}" for note in summary.get("notes", [])]
    run_dir = Path(str(summary.get("run_dir")))
    files = [name for name in RUN_FILES if (run_dir / name).exists()]  # figures/ only when training.figures
    lines.append(f"files           {', '.join(files)}")
    return "\n".join(lines)


def describe_curves(curves: dict[str, Any]) -> str:
    """One line of the destroyed-set curves (``analyses.destroyed_sets``): the share recognised per bin, per model."""
    edges = curves["bin_edges"]
    shares = "; ".join(f"{MODEL_LABELS.get(name, name)} " + " ".join("-" if s is None else f"{s:.2f}" for s in row)
                       for name, row in curves["share"].items())
    return (f"destroyed test sets recognised per flip-fraction bin ({edges[0]:.2g}..{edges[-1]:.2g}, "
            f"{len(edges) - 1} log-spaced bins, {curves['destroyed_sets']} sets): {shares}")


def describe_recall_by_kind(by_kind: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str]) -> str:
    """Lines of the recall per kind (``analyses.kind_breakdown``): each model's."""
    lines = []
    for name, kinds in by_kind.items():
        recalls = "  ".join(f"{kind} {row['recall']:.2f}" for kind, row in kinds.items())
        lines.append(f"recall per kind, {labels.get(name, name)}: {recalls}")
    return "\n".join(lines)
