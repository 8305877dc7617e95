"""A failure costs no epoch: restarted, requeued and preempted jobs continue the run they started.

Each test runs real jobs (the trainer, the CLI) on tiny data, injects the fault (SIGTERM, a kill inside an
epoch), and checks the run directory: one run, every epoch once, and the same weights as a run that was
never interrupted. ``kill -9`` of a worker under ``torchrun --max-restarts=1`` runs in
notebooks/06_fault_tolerance.ipynb (under nbval, in the suite), whose cells assert the same of it; a torchrun
job on two nodes that SLURM stops and requeues (SIGTERM to every process, the job id as --rdzv-id) runs on the
local SLURM cluster in test_slurm.py.
"""

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject
import ddp_helpers
from conftest import REPO, TINY

LIBRARY = str(Path(QG.__file__).resolve().parents[1])  # the tree under test, not another installed one

EPOCHS = 6


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    """The tiny job (epochs slow enough to stop one in the middle), written as a config file."""
    folder = tmp_path_factory.mktemp("restarts")
    config = QG.apply_overrides(TINY, {"training.path": str(folder / "runs"), "training.num_epochs": EPOCHS,
                                       "data.root": str(folder / "data"), "early_stopping.patience": 100,
                                       "criterion": resolve_pyobject("ddp_helpers.cross_entropy_slowly")})
    path = folder / "job.yaml"
    path.write_text(QG.dump_config(QG.load_config(config)))
    return path


def _assert_same_weights(expected: dict, got: dict) -> None:
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-6, atol=1e-6, msg=name)


def _epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _final_model(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def _train_in_process(config: dict):
    trainer = QG.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    try:
        trainer.run_training(train_loader, val_loader)
    finally:
        trainer.close()
    return trainer


def test_a_run_killed_mid_epoch_resumes_at_the_next_batch_and_ends_as_if_never_stopped(tiny_config):
    settings = {"training.num_epochs": 2, "training.checkpoint_every_n_steps": 2, "model.dropout": 0.3}
    reference = _train_in_process(tiny_config({**settings, "training.run_name": "reference"}))
    # 1 signature check + epoch 0 (7 training, 2 validation batches), then the 5th batch of epoch 1:
    # after the checkpoint of batch 4 (every 2 steps), before the one of batch 6.
    ddp_helpers.interrupt.update(at_call=1 + 9 + 5, calls=0)
    killed = tiny_config({**settings, "training.run_name": "killed",
                          "criterion": resolve_pyobject("ddp_helpers.cross_entropy_interrupted")})
    with pytest.raises(KeyboardInterrupt):
        _train_in_process(killed)
    ddp_helpers.interrupt.update(at_call=None)
    run_dir = reference.run_dir.parent / "killed"
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["in_epoch"]["completed_batches"] == 4
    resumed = _train_in_process(QG.apply_overrides(killed, {"training.resume": str(run_dir)}))
    assert [r["epoch"] for r in resumed.history] == [0, 1]
    assert resumed.history[1]["train_loss"] == pytest.approx(reference.history[1]["train_loss"], rel=1e-6)
    _assert_same_weights(_final_model(reference.run_dir), _final_model(run_dir))


@pytest.mark.parametrize("old_world, new_world", [(2, 3), (2, 1)])
def test_a_run_continued_on_another_world_size_takes_this_jobs_batch_lr_and_schedule(tiny_config, old_world,
                                                                                  new_world):
    cosine = resolve_pyobject("torch.optim.lr_scheduler.CosineAnnealingLR")
    settings = {"training.lr_scaling": "linear", "training.scheduler_type": cosine, "training.num_epochs": 4,
                "training.optimizer_kwargs": {"lr": 1e-2}, "training.run_name": "elastic", "training.checkpoint_at": 1}
    first = QG.launch(tiny_config(settings), nproc=old_world)
    run_dir = Path(first["run_dir"])
    rows = list(csv.DictReader(open(run_dir / "metrics.csv", newline="")))
    rows_to_keep = 2  # continue as if the job had died after epoch 1
    checkpoint = torch.load(run_dir / "checkpoints" / f"epoch_{rows_to_keep - 1}.pt", weights_only=True)
    torch.save(checkpoint, run_dir / "checkpoints" / "last.pt")
    QG.launch(tiny_config(settings), nproc=new_world)  # the same run name: continue
    log = (run_dir / "logs" / "rank_0.log").read_text()
    batch = TINY["training"]["batch_size"]
    assert (f"continuing a run of {old_world} processes on {new_world}: effective batch {batch * old_world} -> "
            f"{batch * new_world}, learning rate {1e-2 * old_world:.3g} -> {1e-2 * new_world:.3g}") in log, log
    rows = list(csv.DictReader(open(run_dir / "metrics.csv", newline="")))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]
    for row in rows[rows_to_keep:]:  # cosine over 4 epochs from this job's LR, at the run's position
        epoch = int(row["epoch"])
        expected = 1e-2 * new_world * (1 + math.cos(math.pi * epoch / 4)) / 2
        assert float(row["lr"]) == pytest.approx(expected, rel=1e-6), epoch


def test_sigterm_to_the_launching_process_stops_every_worker_after_a_checkpoint(config_file, tmp_path):
    """``python -m QuantumGrav train --nproc 2`` (QG.launch): SIGTERM to the launcher reaches the workers,
    which checkpoint and stop (none is left training on its own); exit 143; the same command continues."""
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "QuantumGrav", "train", "--config", str(config_file), "--nproc", "2",
               "--set", f"training.path={runs}", "--set", "training.run_name=spawned"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), LIBRARY])}
    launcher = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    run_dir = runs / "spawned"
    try:
        deadline = time.monotonic() + 180
        while not ((run_dir / "metrics.csv").exists() and _epochs(run_dir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = psutil.Process(launcher.pid).children(recursive=True)
        launcher.send_signal(signal.SIGTERM)
        output, _ = launcher.communicate(timeout=120)
        _, alive = psutil.wait_procs(workers, timeout=30)
    finally:
        launcher.kill()
    assert alive == [], f"workers left running: {alive}"
    assert launcher.returncode == 143, output[-5000:]
    assert "stopped on SIGTERM after checkpointing" in output
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-5000:]
    assert _epochs(run_dir) == list(range(EPOCHS))
