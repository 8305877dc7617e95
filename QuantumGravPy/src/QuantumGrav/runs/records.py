"""What a run writes about itself (rank 0): its resolved config.yaml, metrics.csv (a row per epoch),
summary.json, the log's epoch and test lines, and the one-screen summary the CLI prints."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..evaluation.baselines import describe_baselines
from ..callbacks import Callback, Decision
from ..config.schema import dump_config
from ..evaluation.destroyed_sets import describe_curves
from ..logging_utils import get_logger
from .artifacts import MetricsCSV, atomic_write_text, write_json

if TYPE_CHECKING:
    from ..training.trainer import Trainer

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them
RUN_FILES = ("config.yaml", "metrics.csv", "summary.json", "checkpoints/", "figures/", "logs/")


def write_resolved_config(run_dir: Path, config: dict[str, Any], derived: dict[str, Any]) -> None:
    """Rank 0: the run's config.yaml. Without resume and run_name, `--config <run dir>/config.yaml`
    starts the same run anew."""
    repeatable = {**config, "training": {**config["training"], "resume": None, "run_name": None}}
    header = "# Resolved config of this run. 'derived' is recomputed by the trainer and ignored on load.\n"
    atomic_write_text(run_dir / "config.yaml", header + dump_config({**repeatable, "derived": derived}))


class RunRecords(Callback):
    """metrics.csv, summary.json and the log lines of every epoch, of the end of training and of the test."""

    main_process_only = True

    def __init__(self, run_dir: Path):
        self.metrics_csv = MetricsCSV(run_dir / "metrics.csv")
        self.started = time.perf_counter()

    def on_epoch_end(self, trainer: "Trainer", record: dict[str, Any]) -> None:
        self.metrics_csv.append(record)
        short = {"accuracy": "acc"}  # the log's name for it since the first release
        scores = "  ".join(f"val_{short.get(m, m)} {record[f'val_{m}']:.3f}" for m in trainer.task.metric_names[1:])
        best = "  *best*" if trainer.early_stopping.improved else ""
        logger.info(f"epoch {record['epoch']:3d}  train_loss {record['train_loss']:.4f}  val_loss "
                    f"{record['val_loss']:.4f}  {scores}  lr {record['lr']:.2e}"
                    f"  {record['graphs_per_s']:.0f} graphs/s{best}")

    def on_fit_end(self, trainer: "Trainer", decision: Decision) -> None:
        es = trainer.early_stopping
        best = next((r[es.metric] for r in trainer.history if r["epoch"] == es.best_epoch), es.best_value)
        trainer.summary.update({"stop_reason": decision.reason, "stopped_by": decision.stopped_by or None,
                                "stopped_at_epoch": trainer.epoch, "best_epoch": es.best_epoch,
                                f"best_{es.metric}": best, f"best_{es.metric}_window_mean": es.best_value,
                                "derived": trainer.optimization.derived})
        self.write_summary(trainer)

    def on_test_end(self, trainer: "Trainer", result: dict[str, Any]) -> None:
        trainer.summary.update(result)
        self.write_summary(trainer)
        scores = ", ".join(f"{m} {result[f'test_{m}']:.3f}" for m in trainer.task.metric_names[1:])
        logger.info("; ".join([f"test {scores}", *describe_baselines(result.get("baselines", {}))]))
        if "destroyed_by_flip_fraction" in result:
            logger.info(describe_curves(result["destroyed_by_flip_fraction"]))

    def write_summary(self, trainer: "Trainer") -> None:
        """summary.json, with the wall time of this process's run so far (a resumed run: since the resume)."""
        trainer.summary["wall_time_s"] = round(time.perf_counter() - self.started, 3)
        write_json(trainer.run_dir / "summary.json", trainer.summary)


def summarise_run(result: dict[str, Any]) -> str:
    """The one-screen summary the CLI prints."""
    summary = result.get("summary", {})
    lines = [
        "",
        "=== QuantumGrav run summary ===",
        f"run directory   {summary.get('run_dir')}",
        f"stopped         epoch {summary.get('stopped_at_epoch')}: {summary.get('stop_reason')}",
        f"best epoch      {summary.get('best_epoch')}",
    ]
    test = result.get("test") or {}
    if test:
        scores = "  ".join(f"{k.removeprefix('test_')} {v:.3f}" for k, v in test.items()
                           if k.startswith("test_") and k != "test_loss")
        lines.append(f"test            {scores}  (loss {test['test_loss']:.4f}, {test['num_test']} causal sets)")
        lines += describe_baselines(test.get("baselines", {}))
        if "destroyed_by_flip_fraction" in test:
            lines.append(describe_curves(test["destroyed_by_flip_fraction"]))
        if "train_mean_rmse" in test:
            lines.append(f"train mean      rmse {test['train_mean_rmse']:.3f}  (predicting the training mean)")
    run_dir = Path(str(summary.get("run_dir")))
    files = [name for name in RUN_FILES if (run_dir / name).exists()]  # figures/ only when training.figures
    lines.append(f"files           {', '.join(files)}")
    return "\n".join(lines)
