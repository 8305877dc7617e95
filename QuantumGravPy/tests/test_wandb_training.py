"""W&B under DDP, end to end: one offline run per job, written by rank 0, equal to metrics.csv."""

import csv
from pathlib import Path

import pytest

import QuantumGrav as QG
from QuantumGrav.runs.wandb_files import read_offline_runs
from conftest import ALL_RESULTS, REPO

WANDB = QG.load_config(REPO / "configs" / "logger" / "wandb_ddp.yaml")["logger"]


def _csv(run_dir):
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _assert_history_equals_csv(run, run_dir):
    epochs = [row for row in run["history"] if "train_loss" in row]
    rows = _csv(run_dir)
    assert len(epochs) == len(rows)
    for logged, row in zip(epochs, rows):
        for key, value in row.items():
            assert logged[key] == pytest.approx(float(value), rel=1e-9), key


@pytest.mark.parametrize("nproc", [1, 2])
def test_one_offline_run_per_job_with_the_metrics_of_the_csv(tiny_config, nproc):
    config = tiny_config({"logger": WANDB, "training.num_epochs": 2, **ALL_RESULTS})
    result = QG.launch(config, nproc=nproc)
    run_dir = Path(result["run_dir"])
    runs = read_offline_runs(run_dir)
    assert len(runs) == 1, "exactly one W&B run per job, whatever the number of processes"
    run = runs[0]
    _assert_history_equals_csv(run, run_dir)
    images = {key for row in run["history"] if "train_loss" not in row for key in row}
    assert images == {"training_curves", "confusion_matrix"}, run["history"]  # the run's figures/, once each
    assert run["config"]["parallel"]["world_size"] == nproc
    assert run["config"]["derived"]["effective_batch_size"] == 8 * nproc
    assert run["summary"]["model/total_params"] == result["summary"]["parameters"]["total_params"]
    assert run["summary"]["test_accuracy"] == pytest.approx(result["test"]["test_accuracy"])
    assert not list(Path.cwd().glob("wandb")), "nothing is written outside the run directory"


def test_resume_continues_the_same_wandb_run(tiny_config):
    first = QG.launch(tiny_config({"logger": WANDB, "training.num_epochs": 1}), nproc=1)
    run_id = read_offline_runs(first["run_dir"])[0]["id"]
    QG.launch(tiny_config({"logger": WANDB, "training.num_epochs": 2, "training.resume": first["run_dir"]}), nproc=1)
    runs = read_offline_runs(first["run_dir"])
    assert {run["id"] for run in runs} == {run_id}


def test_a_resumed_run_logs_the_epochs_that_a_stopped_service_had_not_written(tiny_config):
    """SLURM stops a job (preemption, time limit, requeue) with SIGTERM to every process, W&B's service too,
    which exits without writing what it held: the file it leaves has only its header (test_slurm.py, on a
    real cluster). The resumed run logs those epochs from metrics.csv before its own."""
    first = QG.launch(tiny_config({"logger": WANDB, "training.num_epochs": 2}), nproc=1)
    (stopped,) = read_offline_runs(first["run_dir"])
    sync_file = next(Path(stopped["dir"]).glob("run-*.wandb"))
    sync_file.write_bytes(sync_file.read_bytes()[:7])
    QG.launch(tiny_config({"logger": WANDB, "training.num_epochs": 3, "training.resume": first["run_dir"]}), nproc=1)
    runs = read_offline_runs(first["run_dir"])
    assert {run["id"] for run in runs if run["history"]} == {stopped["id"]}
    _assert_history_equals_csv({"history": [row for run in runs for row in run["history"]]}, first["run_dir"])


def test_training_carries_on_when_wandb_fails(tiny_config, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("wandb service unreachable")

    monkeypatch.setattr(wandb, "init", broken_init)
    result = QG.launch(tiny_config({"logger": WANDB, "training.num_epochs": 2}), nproc=1)
    assert len(_csv(result["run_dir"])) == 2
    log = (Path(result["run_dir"]) / "logs" / "rank_0.log").read_text()
    assert log.count("W&B logging is off for the rest of this run: wandb.init failed") == 1
