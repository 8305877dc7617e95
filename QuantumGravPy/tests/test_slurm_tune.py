"""configs/slurm_tune.sbatch on a real SLURM cluster: a job array whose tasks (2 processes each, on 2 nodes)
are workers of one study; together they stop at the study's trials.

Needs a running cluster that ``sbatch`` reaches (``SLURM_CONF``), such as the local one of issue 18
(``scripts/local_slurm.sh start``, then ``eval "$(scripts/local_slurm.sh env)"``); skipped without one.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import QuantumGrav as QG
from QuantumGrav.config import resolve_pyobject
from conftest import REPO, TINY


def _cluster_answers() -> bool:
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        return False
    return subprocess.run(["scontrol", "ping"], capture_output=True, timeout=30, check=False).returncode == 0


pytestmark = pytest.mark.skipif(not _cluster_answers(), reason="no SLURM cluster answers (scontrol ping): start one "
                                                               "with scripts/local_slurm.sh and set SLURM_CONF")


def test_the_job_array_shares_one_study_and_stops_at_its_trials(tmp_path, data_root):
    config = {**QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "data.root": str(data_root),
                                          "training.num_epochs": 2}),
              "tune": {"study": "array", "path": str(tmp_path / "studies"), "trials": 3,
                       "space": {"model.pooling": {"choices": ["mean", "max", "add"]}}},
              # a second per epoch: both workers are up before the first could finish the study alone
              "callbacks": [{"type": resolve_pyobject("tune_helpers.SlowEpochs"), "kwargs": {"seconds": 1.0}}]}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(QG.dump_config(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), str(Path(__file__).parent)])}
    done = subprocess.run(["sbatch", "--wait", "--array=0-1", "--gpus-per-node=0", "--cpus-per-task=2",
                           f"--output={tmp_path}/worker-%a.out", f"--export=ALL,NPROC_PER_NODE=2,CONFIG={study_file}",
                           "configs/slurm_tune.sbatch"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    logs = {p.name: p.read_text() for p in tmp_path.glob("worker-*.out")}
    assert done.returncode == 0, (done.stderr, logs)
    with open(tmp_path / "studies" / "array" / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    finished = [row for row in rows if row["state"] == "COMPLETE"]
    assert len(finished) == 3 and all(row["reason"].startswith("not run: ") for row in rows if row["state"] == "FAIL")
    assert len({row["worker"] for row in finished}) == 2, "both tasks of the array trained trials of the study"
    for row in finished:  # every trial a DDP job of 2 processes
        assert sorted(p.name for p in (Path(row["run_dir"]) / "logs").iterdir()) == ["rank_0.log", "rank_1.log"]
    assert sorted(logs) == ["worker-0.out", "worker-1.out"]
    assert all("=== QuantumGrav study 'array' ===" in text for text in logs.values())
