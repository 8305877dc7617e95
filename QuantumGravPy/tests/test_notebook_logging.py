"""Notebook 05 (logging, W&B, memory, AMP, accumulation) through papermill with NON-default parameters.

``pytest notebooks --nbval`` compares the stored outputs, made with the full-size defaults of the notebook's
``parameters`` cell (bf16, 2 accumulation steps of 16 graphs). Here it runs outside test mode, every size given,
with bf16 autocast, 3 accumulation steps of 8 graphs (with a short last group: 5 batches per process per epoch) and
3 epochs, into tmp_path, and the test checks what the notebook reported in its last cell against
the files the runs left behind: the derived effective batch size and learning rate, one offline W&B
run equal to metrics.csv, a log file per rank, the set-up block of rank 0's log, and the plain run beside it
(amp off, one batch of 24 per step: the same effective batch and learning rate) with the activations one
training step keeps.
"""

from __future__ import annotations

import ast
import csv
import json
import math
from pathlib import Path

import pytest
import yaml

papermill = pytest.importorskip("papermill")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("wandb")

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.runs.wandb_files import read_offline_runs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "05_logging_and_wandb.ipynb"

PARAMETERS = {"world_size": 2, "num_epochs": 3, "amp": "bf16", "accumulation_steps": 3, "batch_size": 8,
              "num_samples": 100, "n_min": 16, "n_max": 24, "log_every_n_steps": 2, "hidden_channels": 32,
              "num_layers": 2}


def _last_cell_summary(notebook) -> dict:
    last = [cell for cell in notebook.cells if cell.cell_type == "code"][-1]
    text = "".join(out.get("text", "") for out in last.outputs
                   if out.output_type == "stream" and out.name == "stdout")
    return json.loads(text)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run the notebook once for every test of this module; returns (summary, run_dir, runs_root)."""
    tmp = tmp_path_factory.mktemp("notebook_05")
    runs_root = tmp / "runs"
    output = tmp / NOTEBOOK.name
    papermill.execute_notebook(
        str(NOTEBOOK), str(output), cwd=str(NOTEBOOK.parent), kernel_name="python3", progress_bar=False,
        log_output=False, parameters={**PARAMETERS, "data_root": str(tmp / "data"), "runs_root": str(runs_root)})
    summary = _last_cell_summary(nbformat.read(output, as_version=4))
    (run_dir,) = [path for path in runs_root.iterdir() if path.name.startswith("run-")]
    return summary, run_dir, runs_root


def _parameters_cell(notebook) -> dict:
    """The literal values of the notebook's papermill ``parameters`` cell."""
    (cell,) = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    return {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(cell.source).body}


def test_the_stored_run_has_both_switches_on_beside_the_plain_run():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    defaults, stored = _parameters_cell(notebook), _last_cell_summary(notebook)
    assert (defaults["amp"], defaults["accumulation_steps"]) == ("bf16", 2)
    # The stored outputs are a run of these defaults (re-execute the notebook after changing them).
    assert (stored["amp"], stored["accumulation_steps"]) == (defaults["amp"], defaults["accumulation_steps"])
    switched, plain = stored["comparison"]
    assert switched["effective batch"] == plain["effective batch"] == 64 and switched["lr"] == plain["lr"]
    assert switched["epochs"] == plain["epochs"] == defaults["num_epochs"]


def test_the_parameters_steer_the_run(executed):
    summary, run_dir, _ = executed
    assert summary["amp"] == "bf16" and summary["accumulation_steps"] == 3
    assert summary["trained_epochs"] == [0, 1, 2]

    config = yaml.load((run_dir / "config.yaml").read_text(), QG.get_loader())
    assert config["training"]["amp"] == "bf16" and config["training"]["accumulation_steps"] == 3
    effective = PARAMETERS["batch_size"] * 3 * PARAMETERS["world_size"]
    assert summary["effective_batch_size"] == config["derived"]["effective_batch_size"] == effective == 48
    # lr_scaling linear (the notebook's default): the base LR of train_ddp.yaml times effective / the notebook's
    # reference_batch_size, 32.
    assert summary["reference_batch_size"] == config["derived"]["reference_batch_size"] == 32
    base_lr = QG.load_config(str(REPO / "configs" / "train_ddp.yaml"))["training"]["optimizer_kwargs"]["lr"]
    assert config["derived"]["lr"] == pytest.approx(base_lr * effective / 32)
    assert summary["lr"] == pytest.approx(config["derived"]["lr"])

    rank0_log = (run_dir / "logs" / "rank_0.log").read_text()
    assert "8 per process x 3 accumulation x 2 processes = 48 effective" in rank0_log
    assert "amp=bf16" in rank0_log
    assert any("amp=bf16" in line for line in summary["setup_lines"])  # what the notebook read back


def test_the_plain_run_beside_it_has_the_same_effective_batch_and_learning_rate(executed):
    summary, run_dir, runs_root = executed
    (plain_dir,) = (runs_root / "plain").iterdir()
    assert plain_dir.name == summary["plain_run_dir"]
    switched, plain = summary["comparison"]
    assert switched["epochs"] == plain["epochs"] == 3  # both runs finished
    assert switched["effective batch"] == plain["effective batch"] == 48
    assert switched["lr"] == pytest.approx(plain["lr"])
    for row in (switched, plain):
        assert row["s per epoch"] > 0 and row["peak MB"] > 0 and 0 <= row["test accuracy"] <= 1
        assert row["memory column"] == "rss_mb"  # on the CPU

    config = yaml.load((plain_dir / "config.yaml").read_text(), QG.get_loader())
    assert (config["training"]["amp"], config["training"]["accumulation_steps"], config["training"]["batch_size"]) \
        == ("off", 1, 24)
    assert config["training"]["seed"] == yaml.load((run_dir / "config.yaml").read_text(), QG.get_loader())[
        "training"]["seed"]
    plain_log = (plain_dir / "logs" / "rank_0.log").read_text()
    assert "24 per process x 1 accumulation x 2 processes = 48 effective" in plain_log and "amp=off" in plain_log
    with open(plain_dir / "metrics.csv", newline="") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1, 2]

    kept = summary["activation_mb"]  # one training step's saved tensors, batch 24 and micro-batches of 8
    assert kept["a batch of the plain run, float32"] > kept["one micro-batch, float32"] > 0
    assert kept["one micro-batch, amp bf16 (this run)"] > 0


def test_one_offline_wandb_run_equal_to_metrics_csv(executed):
    summary, run_dir, runs_root = executed
    assert summary["wandb_offline_runs"] == 1 and summary["wandb_history_equals_csv"] is True
    assert summary["wandb_epoch_rows"] == 3
    assert summary["callback_column"] is True  # the callback of my_callbacks.py, in metrics.csv and W&B

    (run,) = read_offline_runs(run_dir)
    assert Path(run["dir"]).name.startswith("offline-run-")
    assert run["config"]["logger"]["wandb"]["mode"] == "offline"
    assert run["config"]["training"]["amp"] == "bf16"
    assert run["config"]["derived"]["effective_batch_size"] == 48
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    epochs = [row for row in run["history"] if "train_loss" in row]
    assert [row["epoch"] for row in epochs] == [int(row["epoch"]) for row in rows] == [0, 1, 2]
    assert all(math.isfinite(row["train_loss"]) for row in epochs)
    # Nothing written outside the run directories: no stray wandb/ folder next to the notebook.
    assert not (NOTEBOOK.parent / "wandb").exists()
    assert sorted(path.name for path in runs_root.iterdir() if not path.name.startswith("run-")) == ["logging_demo",
                                                                                                 "plain"]


def test_every_rank_has_a_full_log_file(executed):
    summary, run_dir, _ = executed
    assert summary["log_files"] == ["rank_0.log", "rank_1.log"]
    assert summary["other_rank_log_levels"] == ["INFO", "WARNING"]
    rank1_log = (run_dir / "logs" / "rank_1.log").read_text()
    assert "[RANK 1]" in rank1_log and "[RANK 0]" not in rank1_log
    assert "above the limit of 1 MB (training.memory_limit_mb)" in rank1_log  # each rank has its own monitor
    assert "training finished at epoch 2: completed 3 epochs" in rank1_log
    assert summary["memory_columns"] == ["rss_mb", "cuda_allocated_mb", "cuda_reserved_mb", "cuda_peak_mb"]
    assert summary["figures"] == ["confusion_matrix.png", "training_curves.png"]
