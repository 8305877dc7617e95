"""A failure costs no epoch: restarted, requeued and preempted jobs continue the run they started.

Each test runs real jobs (torchrun with a restart budget, the CLI) on tiny data, injects the fault
(``kill -9`` of a worker, SIGTERM), and checks the run directory: one run, every epoch once, and the
same weights as a run that was never interrupted.
"""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import yaml

import QuantumGrav as QG
from QuantumGrav.config import resolve_pyobject
from conftest import REPO, TINY

SCRIPT = REPO / "QuantumGravPy" / "examples" / "train_ddp_standalone.py"
EPOCHS = 6


@pytest.fixture
def job(tmp_path, data_root):
    """A tiny config file; ``job.start(args)`` starts the standalone script under torchrun with it."""
    config = QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "training.num_epochs": EPOCHS,
                                       "data.root": str(data_root), "early_stopping.patience": 100,
                                       "criterion": resolve_pyobject("ddp_helpers.cross_entropy_slowly")})
    path = tmp_path / "job.yaml"
    path.write_text(QG.dump_config(QG.load_config(config)))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}
    for variable in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(variable, None)

    class Job:
        runs = tmp_path / "runs"
        config_path = path

        @staticmethod
        def torchrun(nproc: int, *args: str, max_restarts: int = 0) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                                     f"--max-restarts={max_restarts}", f"--master_port={QG.find_free_port()}",
                                     str(SCRIPT), "--config", str(path), *args],
                                    cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        @staticmethod
        def run_dirs() -> list[Path]:
            """The run directories of the job under test (not the uninterrupted reference)."""
            folders = Job.runs.iterdir() if Job.runs.exists() else []
            return sorted(p for p in folders if p.is_dir() and p.name not in ("uninterrupted", ".jobs"))

    return Job


def _epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _wait_for_epochs(job, count: int, process: subprocess.Popen, timeout_s: float = 180.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()[-4000:]
        dirs = job.run_dirs()
        if dirs and (dirs[0] / "metrics.csv").exists() and len(_epochs(dirs[0])) >= count:
            return dirs[0]
        time.sleep(0.05)
    raise AssertionError(f"no {count} epochs within {timeout_s} s")


def _worker(launcher: subprocess.Popen, rank: int) -> psutil.Process:
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"no worker with RANK={rank}")


def _final_model(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def test_a_worker_killed_under_torchrun_restarts_and_the_run_continues_where_it_stopped(job):
    reference = job.torchrun(2, "--set", "training.run_name=uninterrupted")
    assert reference.wait(timeout=240) == 0, reference.stdout.read()[-4000:]
    launcher = job.torchrun(2, max_restarts=1)
    try:
        _wait_for_epochs(job, 3, launcher)
        _worker(launcher, 1).kill()
        output, _ = launcher.communicate(timeout=240)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, output[-5000:]
    run_dirs = job.run_dirs()
    assert len(run_dirs) == 1, f"the restart must continue the first attempt's run, got {run_dirs}"
    assert _epochs(run_dirs[0]) == list(range(EPOCHS))  # every epoch exactly once
    assert "resuming" in output
    expected, got = _final_model(job.runs / "uninterrupted"), _final_model(run_dirs[0])
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-6, atol=1e-6, msg=name)
