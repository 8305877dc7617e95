"""The run's records, written by rank 0: metrics.csv (a row per epoch), summary.json, and the log's epoch and
test lines."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..data.sources import data_notes
from ..evaluation.baselines import describe_baselines
from ..evaluation.undefined import describe_undefined
from ..common.logging_utils import get_logger
from ..runs.artifacts import MetricsCSV, write_json
from ..runs.records import describe_curves
from .base import Callback, Decision
from .early_stopping import EarlyStopping
from .state import RunState

logger = get_logger("training")  # the run's own lines, in one channel whatever module writes them


class RunRecords(Callback):
    """metrics.csv, summary.json and the log lines of every epoch, of the end of training and of the test."""

    main_process_only = True

    def __init__(self, run_dir: Path, early_stopping: EarlyStopping):
        self.early_stopping = early_stopping
        self.metrics_csv = MetricsCSV(run_dir / "metrics.csv")
        self.started = time.perf_counter()

    def on_fit_start(self, state: RunState) -> None:
        """What the data's reader did to the sets that the run should say: e.g. how many it closed or left out
        (a QuantumGrav.jl store's ``not_partial_orders``), in the log and the summary's ``notes``."""
        state.summary.setdefault("notes", [])  # always there: what the run could not measure, or did to the data
        for line in data_notes(state.dataset):
            logger.warning(line)
            add_note(state.summary, line)

    def on_epoch_end(self, state: RunState, record: dict[str, Any]) -> None:
        self.metrics_csv.append(record)
        short = {"accuracy": "acc"}  # the log line keeps the short name that scripts parse
        scores = "  ".join(f"val_{short.get(m, m)} {record[f'val_{m}']:.3f}" for m in state.task.metric_names[1:])
        best = "  *best*" if self.early_stopping.improved else ""
        logger.info(f"epoch {record['epoch']:3d}  train_loss {record['train_loss']:.4f}  val_loss "
                    f"{record['val_loss']:.4f}  {scores}  lr {record['lr']:.2e}"
                    f"  {record['graphs_per_s']:.0f} graphs/s{best}")

    def on_fit_end(self, state: RunState, decision: Decision) -> None:
        es = self.early_stopping
        best = next((r[es.metric] for r in state.history if r["epoch"] == es.best_epoch), es.best_value)
        state.summary.update({"stop_reason": decision.reason, "stopped_by": decision.stopped_by or None,
                              "stopped_at_epoch": state.epoch, "best_epoch": es.best_epoch,
                              f"best_{es.metric}": best, f"best_{es.metric}_window_mean": es.best_value,
                              "derived": state.derived})
        self.write_summary(state)

    def on_test_end(self, state: RunState, result: dict[str, Any]) -> None:
        state.summary.update(result)
        for line in test_notes(state, result):
            logger.warning(line)
            add_note(state.summary, line)
        self.write_summary(state)
        scores = ", ".join(f"{m} {result[f'test_{m}']:.3f}" for m in state.task.metric_names[1:])
        logger.info("; ".join([f"test {scores}", *describe_baselines(result.get("baselines", {}))]))
        if "destroyed_by_flip_fraction" in result:
            logger.info(describe_curves(result["destroyed_by_flip_fraction"]))

    def write_summary(self, state: RunState) -> None:
        """summary.json, with the wall time of this process's run so far (a resumed run: since the resume)."""
        state.summary["wall_time_s"] = round(time.perf_counter() - self.started, 3)
        write_json(state.run_dir / "summary.json", state.summary)


def test_notes(state: RunState, result: dict[str, Any]) -> list[str]:
    """What the test split could not measure: its undefined metrics and why, and the kinds it holds no set of."""
    metrics = {"confusion": result.get("confusion_matrix"), "iou": result.get("test_iou"), "r2": result.get("test_r2")}
    undefined = state.task.undefined(metrics)
    lines = [describe_undefined(undefined, f"the test split ({result['num_test']} sets)")] if undefined else []
    absent = result.get("kinds_without_test_sets")
    if absent:
        lines.append(f"the test split ({result['num_test']} sets) holds no set of {', '.join(absent)}: their recall is "
                     f"undefined (marked 'no test set' in figures/recall_by_kind.png)")
    return lines


def add_note(summary: dict[str, Any], line: str) -> None:
    """One line for the summary's ``notes`` (printed under the run's result), once."""
    notes = summary.setdefault("notes", [])
    if line not in notes:
        notes.append(line)
