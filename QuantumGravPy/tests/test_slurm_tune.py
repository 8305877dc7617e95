"""configs/slurm_tune.sbatch on the local SLURM cluster (scripts/local_slurm.sh; the ``slurm_cluster`` fixture):
a job array whose tasks (2 processes each) are workers of one study stops, together, at the study's trials;
and a bad study config ends every task once, with exit code 2, before any torchrun starts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject
from conftest import TINY

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]
CPU_WORKERS = ["--gpus-per-node=0", "--cpus-per-task=2"]  # the overrides a CPU partition needs (the header says)


def _study_file(tmp_path: Path, data_root: Path, **tune) -> Path:
    config = {**QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "data.root": str(data_root),
                                          "training.num_epochs": 2}),
              "tune": {"study": "array", "path": str(tmp_path / "studies"), "trials": 3,
                       "space": {"model.pooling": {"choices": ["mean", "max", "add"]}}, **tune},
              # a second per epoch: both workers are up before the first could finish the study alone
              "callbacks": [{"type": resolve_pyobject("tune_helpers.SlowEpochs"), "kwargs": {"seconds": 1.0}}]}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(QG.dump_config(config))
    return study_file


def test_the_job_array_shares_one_study_and_stops_at_its_trials(slurm_cluster, tmp_path, data_root):
    job = slurm_cluster.submit("configs/slurm_tune.sbatch", "--config", str(_study_file(tmp_path, data_root)),
                               options=["--array=0-1", *CPU_WORKERS, f"--output={tmp_path}/worker-%a.out"],
                               env={"NPROC_PER_NODE": "2"})
    tasks = slurm_cluster.wait_for_array(job, timeout_s=480)
    logs = {p.name: p.read_text() for p in tmp_path.glob("worker-*.out")}
    assert [t["ExitCode"] for t in tasks] == ["0:0", "0:0"], (tasks, logs)
    with open(tmp_path / "studies" / "array" / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    finished = [row for row in rows if row["state"] == "COMPLETE"]
    assert len(finished) == 3 and all(row["reason"].startswith("not run: ") for row in rows if row["state"] == "FAIL")
    assert len({row["worker"] for row in finished}) == 2, "both tasks of the array trained trials of the study"
    for row in finished:  # every trial a DDP job of 2 processes
        assert sorted(p.name for p in (Path(row["run_dir"]) / "logs").iterdir()) == ["rank_0.log", "rank_1.log"]
    assert sorted(logs) == ["worker-0.out", "worker-1.out"]
    assert all("=== QuantumGrav study 'array' ===" in text for text in logs.values())


def test_a_bad_study_config_ends_each_task_once_with_exit_code_2(slurm_cluster, tmp_path, data_root):
    study_file = _study_file(tmp_path, data_root, space={"model.hiden_channels": {"choices": [[8], [16]]}})
    job = slurm_cluster.submit("configs/slurm_tune.sbatch", "--config", str(study_file),
                               options=["--array=0-1", *CPU_WORKERS, f"--output={tmp_path}/worker-%a.out"])
    tasks = slurm_cluster.wait_for_array(job, timeout_s=180)
    assert [(t["ExitCode"], t["Restarts"]) for t in tasks] == [("2:0", "0"), ("2:0", "0")], tasks
    for log in (tmp_path / f"worker-{i}.out" for i in (0, 1)):
        text = log.read_text()
        assert text.count("tune.space.model.hiden_channels: unknown key") == 1, text
        assert "[RANK" not in text and "Traceback" not in text, "no worker process started"
    assert not (tmp_path / "studies").exists(), "nothing written for a bad config"
