"""The fault matrix (issue 8, section 3): a kill while a checkpoint is written, a damaged last.pt, a full
disk, a second job on the same run directory, a stalled rank. Each fault is injected for real."""

import csv
import datetime
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.runs.checkpoint_files import RunLock, save_last_checkpoint
from QuantumGrav.config.yaml_io import resolve_pyobject
from QuantumGrav.distributed.runtime import Runtime
from QuantumGrav.distributed.stalls import _check_in_after_timeout, _timeout_message
from conftest import REPO, TINY

HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_root):
    """A 2-epoch run: checkpoints/last.pt holds epoch 1, previous.pt epoch 0."""
    folder = tmp_path_factory.mktemp("fault_run")
    config = QG.load_config(QG.apply_overrides(TINY, {"training.path": str(folder), "data.root": str(data_root),
                                                      "training.num_epochs": 2, "training.run_name": "run"}))
    trainer = QG.Trainer(config)
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return trainer.run_dir


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A private copy of the finished run (the faults below damage it)."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def _resume_config(run_dir: Path, num_epochs: int = 3) -> dict:
    return QG.load_config(run_dir / "config.yaml", {"training.resume": str(run_dir), "training.num_epochs": num_epochs})


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "QuantumGrav", *args], env=ENV, capture_output=True, text=True,
                          timeout=240, cwd=REPO, **kwargs)


def resume_args(run_dir: Path, num_epochs: int = 3) -> list[str]:
    return ["train", "--config", str(run_dir / "config.yaml"), "--resume", str(run_dir),
            "--set", f"training.num_epochs={num_epochs}"]


def epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_last_pt_keeps_the_checkpoint_it_replaces_as_previous_pt(finished_run):
    checkpoints = finished_run / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.pt", "last.pt", "previous.pt"]
    assert torch.load(checkpoints / "last.pt", weights_only=True)["epoch"] == 1
    assert torch.load(checkpoints / "previous.pt", weights_only=True)["epoch"] == 0
    assert not (finished_run / ".lock").exists(), "close() releases the run's lock"


def test_kill_9_while_last_pt_is_renamed_leaves_a_loadable_checkpoint_and_the_resume_finishes(tmp_path, data_root):
    config_file = tmp_path / "train.yaml"
    config_file.write_text(QG.dump_config(QG.apply_overrides(TINY, {
        "training.path": str(tmp_path / "runs"), "data.root": str(data_root), "training.run_name": "killed"})))
    marker = tmp_path / "paused"
    job = subprocess.Popen([sys.executable, str(HERE / "pause_before_last_checkpoint.py"), str(marker), "train",
                            "--config", str(config_file)], cwd=REPO, env=ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the job never reached the second checkpoint"
    finally:
        job.kill()  # kill -9, in the middle of saving epoch 1's checkpoint
        job.wait()
    run_dir = tmp_path / "runs" / "killed"
    checkpoints = run_dir / "checkpoints"
    complete = [p for p in (checkpoints / "last.pt", checkpoints / "previous.pt") if p.exists()]
    assert complete, "a complete checkpoint survives the kill"
    assert all(torch.load(p, weights_only=True)["epoch"] == 0 for p in complete)
    assert json.loads((run_dir / ".lock").read_text())["pid"] == job.pid, "the killed job's lock is left behind"

    resumed = cli(*resume_args(run_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "taking over the lock" in resumed.stderr and "no longer runs" in resumed.stderr
    assert epochs(run_dir) == [0, 1, 2], "every epoch once"
    assert torch.load(checkpoints / "last.pt", weights_only=True)["epoch"] == 2


@pytest.mark.parametrize("damage", ["truncated", "random bytes"])
def test_a_damaged_last_pt_falls_back_to_previous_pt_with_a_warning(run_copy, damage, collect_log):
    last = run_copy / "checkpoints" / "last.pt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2] if damage == "truncated" else os.urandom(len(data)))
    warnings = collect_log("QuantumGrav")
    trainer = QG.Trainer(_resume_config(run_copy))
    trainer.close()
    assert trainer.start_epoch == 1, "resumed from previous.pt (epoch 0)"
    (warning,) = [m for m in warnings if "falling back" in m]
    assert f"{last} is truncated or corrupt" in warning and str(last.parent / "previous.pt") in warning


def test_a_damaged_last_pt_is_replaced_without_pushing_out_the_good_previous_pt(tmp_path):
    save_last_checkpoint(tmp_path, {"model": {}, "epoch": 0})
    save_last_checkpoint(tmp_path, {"model": {}, "epoch": 1})
    (tmp_path / "last.pt").write_bytes(b"damaged")
    save_last_checkpoint(tmp_path, {"model": {}, "epoch": 2})
    assert torch.load(tmp_path / "previous.pt", weights_only=True)["epoch"] == 0
    assert torch.load(tmp_path / "last.pt", weights_only=True)["epoch"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "previous.pt"], "no temporary file left"


def test_no_loadable_checkpoint_exits_2_naming_each_file_and_changes_nothing(run_copy):
    checkpoints = run_copy / "checkpoints"
    (checkpoints / "last.pt").write_bytes(b"not a checkpoint")
    (checkpoints / "previous.pt").unlink()
    before = _contents(run_copy)
    done = cli(*resume_args(run_copy))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert f"{checkpoints / 'last.pt'} is truncated or corrupt" in error
    assert f"{checkpoints / 'previous.pt'} is missing" in error
    assert "copy one of the other checkpoints of the run (best.pt)" in error
    assert _contents(run_copy) == before, "nothing overwritten or removed"


def limit_file_size(max_bytes: int):
    def apply() -> None:  # in the child, before it starts Python
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return apply


def test_a_full_disk_while_saving_is_one_error_naming_the_file_and_the_checkpoints_stay(run_copy):
    checkpoints = run_copy / "checkpoints"
    size = (checkpoints / "last.pt").stat().st_size
    written_first = ("config.yaml", "metrics.csv", "logs/rank_0.log")  # by the resumed run, before its checkpoint
    limit = size // 2
    assert all((run_copy / name).stat().st_size * 2 < limit for name in written_first), "it must stop checkpoints only"
    before = _contents(checkpoints)
    done = cli(*resume_args(run_copy), preexec_fn=limit_file_size(limit))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert f"cannot write the checkpoint '{checkpoints}/" in error and "File too large (EFBIG)" in error
    assert f"--resume {run_copy}" in error
    assert _contents(checkpoints) == before, "the checkpoints saved before are intact, no temporary file is left"
    assert torch.load(checkpoints / "last.pt", weights_only=True)["epoch"] == 1
    assert not (run_copy / ".lock").exists(), "the failed job released its lock"


def test_a_second_job_on_a_locked_run_is_refused_and_a_stale_lock_is_taken_over(run_copy, collect_log):
    other_job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lock = run_copy / ".lock"
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": other_job.pid, "job_token": None,
                                "started": "2026-01-02T03:04:05"}))
    try:
        with pytest.raises(QG.UserError) as refused:
            QG.Trainer(_resume_config(run_copy))
    finally:
        other_job.kill()
        other_job.wait()
    message = str(refused.value)
    assert f"process {other_job.pid} on host {socket.gethostname()}, started 2026-01-02T03:04:05" in message
    assert f"delete {lock}" in message
    assert epochs(run_copy) == [0, 1] and lock.exists(), "the refused job changed nothing"

    warnings = collect_log("QuantumGrav")
    trainer = QG.Trainer(_resume_config(run_copy))  # that process is gone: its lock is stale
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    trainer.close()
    assert len([m for m in warnings if "taking over the lock" in m and "no longer runs" in m]) == 1
    assert not lock.exists()


def test_a_lock_of_the_same_job_is_taken_over_and_another_hosts_lock_is_not(tmp_path):
    earlier_attempt = RunLock.acquire(tmp_path, job_token="slurm-123")
    earlier_attempt.content["host"] = "node-a"  # as if written on another node: its pid cannot be checked
    (tmp_path / ".lock").write_text(json.dumps(earlier_attempt.content))
    restarted = RunLock.acquire(tmp_path, job_token="slurm-123")
    assert json.loads((tmp_path / ".lock").read_text())["id"] == restarted.content["id"]
    earlier_attempt.release()  # the earlier attempt's release leaves the new owner's lock alone
    assert (tmp_path / ".lock").exists()
    restarted.content["host"] = "node-b"
    (tmp_path / ".lock").write_text(json.dumps(restarted.content))
    with pytest.raises(QG.UserError, match="in use by another job: process .* on host node-b"):
        RunLock.acquire(tmp_path, job_token="slurm-456")


def test_a_stalled_rank_is_named_when_the_collective_times_out(tiny_config):
    config = tiny_config({"criterion": resolve_pyobject("ddp_helpers.loss_stalling_on_rank_1"),
                          "parallel.timeout_s": 5})
    with pytest.raises(QG.TrainingFailed) as failed:
        QG.launch(config, nproc=2)
    assert failed.value.rank == 0, "rank 0 waited for rank 1 and reports it"
    assert "CollectiveTimeout: rank 1 did not arrive at a collective operation within 5 s" in str(failed.value)
    assert "Timed out waiting" in failed.value.worker_traceback, "gloo's own error stays in the traceback"


def test_the_check_in_names_the_missing_ranks_or_says_that_every_rank_arrived_late(monkeypatch):
    store = torch.distributed.HashStore()
    store.set_timeout(datetime.timedelta(seconds=0.3))  # the group's timeout, and so the check-in's grace
    monkeypatch.setattr(torch.distributed.distributed_c10d, "_get_default_store", lambda: store)
    assert _check_in_after_timeout(2, 3) == ([0, 1], 0.3)
    assert _check_in_after_timeout(0, 3) == ([1], 0.3)
    assert _check_in_after_timeout(1, 3) == ([], 0.3)
    assert "rank 1 did not arrive" in _timeout_message([1], 300) and "logs/rank_1.log" in _timeout_message([1], 300)
    assert "every rank checked in right after" in _timeout_message([], 300)


def test_errors_other_than_a_collective_timeout_pass_unchanged():
    with pytest.raises(RuntimeError, match="^DataLoader timed out after 5 seconds$"):
        with Runtime(rank=0, world_size=2).naming_stalled_ranks():
            raise RuntimeError("DataLoader timed out after 5 seconds")
