"""The manifold-likeness study says how flat a run's validation loss was when it stopped (issue 47: "measure that
validation has flattened"), read from the run's own metrics.csv, config.yaml and summary.json: the windowed loss is
the mean early stopping compares, and rows run before the study kept it read "not recorded"."""

import json
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import study_manifold_like  # noqa: E402

VAL_LOSS = [0.50, 0.40, 0.30, 0.20, 0.30, 0.20, 0.25, 0.35]  # best window (mean of 3): epochs 3..5, 0.2333


@pytest.fixture
def run_dir(tmp_path):
    lines = ["epoch,train_loss,val_loss,lr"] + [f"{epoch},1.0,{loss},{0.01 / (epoch + 1)}"
                                                  for epoch, loss in enumerate(VAL_LOSS)]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "config.yaml").write_text(
        "training:\n  scheduler_type: !pyobject 'torch.optim.lr_scheduler.CosineAnnealingLR'\n"
        "early_stopping: {enabled: true, metric: val_loss, mode: min, patience: 2, min_delta: 0.0, window: 3}\n")
    (tmp_path / "summary.json").write_text(json.dumps({"best_epoch": 5, "stopped_at_epoch": 7}))
    return tmp_path


def test_flatness_reads_the_windowed_validation_loss_over_the_last_patience_epochs(run_dir):
    flat = study_manifold_like.flatness(run_dir)
    assert (flat["patience"], flat["window"], flat["best_epoch"], flat["stopped_at_epoch"]) == (2, 3, 5, 7)
    assert flat["val_loss_at_best"] == pytest.approx(0.20)
    assert flat["windowed_val_loss_at_best"] == pytest.approx((0.20 + 0.30 + 0.20) / 3)
    assert flat["windowed_val_loss_at_stop"] == pytest.approx((0.20 + 0.25 + 0.35) / 3)
    # epoch 5's window (0.2333) to epoch 7's (0.2667): the loss rose over the last 2 epochs, nothing left to gain
    assert flat["windowed_val_loss_change_over_patience"] == pytest.approx(0.80 / 3 - 0.70 / 3)
    assert flat["windowed_val_loss_range_over_patience"] == pytest.approx([0.70 / 3, 0.80 / 3])
    assert (flat["lr_at_start"], flat["lr_at_stop"]) == pytest.approx((0.01, 0.01 / 8))


def test_the_paired_table_prints_flatness_and_says_when_a_row_did_not_record_it(run_dir, capsys):
    runs = [{"row": "gnn", "seed": 3, "best_epoch": 5, "stopped_at_epoch": 7,
             "flatness": study_manifold_like.flatness(run_dir)},
            {"row": "gnn", "seed": 1, "best_epoch": 20, "stopped_at_epoch": 30}]
    study_manifold_like.print_flatness("gnn", runs)
    table = capsys.readouterr().out
    assert "| 3 | 5 / 7 | 0.2000 | 0.2333 | 0.2667 | +0.0333 over 2 | 0.00125 / 0.01 |" in table
    assert "| 1 | 20 / 30 | not recorded |" in table
