"""The local SLURM cluster of the tests (``scripts/local_slurm.sh``: slurmctld and two slurmd, n1 and n2, on this
machine) and what a test does with it: submit a batch script as a user does, follow the job, find its processes.

``start_cluster()`` is behind the ``slurm_cluster`` fixture (conftest.py): once per test run it starts the cluster
unless it runs already. Without SLURM on the machine the tests that use it are skipped with the reason; under CI
(``CI=true``, where .ci/run starts the cluster before the suite) a missing cluster is a failure. A test file marks
itself ``pytest.mark.slurm`` and asks for the fixture:

    def test_an_array(slurm_cluster, tmp_path):
        job = slurm_cluster.submit("configs/slurm_tune.sbatch", "--config", "...",
                                   options=["--array=0-1", f"--output={tmp_path}/slurm-%A_%a.out"])
        tasks = slurm_cluster.wait_for_array(job, timeout_s=300)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

import QuantumGrav as QG

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "scripts" / "local_slurm.sh"
TESTS = Path(__file__).resolve().parent
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


class Cluster:
    """SLURM's commands pointed at the local cluster, and jobs that run this checkout's library.

    ``env``: the environment of sbatch (and so, with sbatch's default --export=ALL, of the jobs): SLURM_CONF,
    this interpreter first on PATH, PYTHONPATH with the library being tested and the tests' helper modules.
    """

    def __init__(self, slurm_conf: str):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
        library = Path(QG.__file__).resolve().parents[1]
        env.update(SLURM_CONF=slurm_conf, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(library), str(TESTS), env.get("PYTHONPATH")])),
                   PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.env = env
        self.submitted: list[int] = []

    def command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), env=self.env, cwd=REPO, capture_output=True, text=True, timeout=60,
                              check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr}{done.stdout}")
        return done

    def submit(self, script: str, *script_args: str, options: list[str], env: dict[str, str] | None = None) -> int:
        """``sbatch OPTIONS SCRIPT ARGS`` from the repository root, as the documentation says; the job's id."""
        done = subprocess.run(["sbatch", "--parsable", *options, script, *script_args], env={**self.env, **(env or {})},
                              cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"sbatch failed: {done.stderr}"
        job = int(done.stdout.strip().split(";")[0])
        self.submitted.append(job)
        return job

    def tasks(self, job: int) -> list[dict[str, str]]:
        """``scontrol show job``'s fields (JobState, ExitCode, Restarts, NodeList, ...): one dict for a job, one
        per task for a job array (with one for its tasks still pending)."""
        lines = self.command("scontrol", "show", "job", "-o", str(job)).stdout.splitlines()
        return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in lines if line.strip()]

    def job(self, job: int) -> dict[str, str]:
        (fields,) = self.tasks(job)
        return fields

    def wait_for_end(self, job: int, timeout_s: float, restarts: int = 0) -> dict[str, str]:
        """The job's fields once it has ended after ``restarts`` requeues and every process of it is gone."""
        (fields,) = self.wait_for_array(job, timeout_s, restarts)
        return fields

    def wait_for_array(self, job: int, timeout_s: float, restarts: int = 0) -> list[dict[str, str]]:
        """Every task's fields once all have ended (after ``restarts`` requeues) and no process of any is left."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            tasks = self.tasks(job)
            if (all(t["JobState"] in ENDED and int(t["Restarts"]) >= restarts for t in tasks)
                    and not self.processes(job)):
                return tasks
            time.sleep(0.5)
        raise AssertionError(f"job {job} did not end within {timeout_s:.0f} s: {self.tasks(job)}")

    @staticmethod
    def processes(job: int) -> list[psutil.Process]:
        """Every process of the job (or of every task of the job array) on this machine, where both nodes
        are: its environment names the job."""
        found = []
        for process in psutil.process_iter():
            environ = environ_of(process)
            if str(job) in (environ.get("SLURM_JOB_ID"), environ.get("SLURM_ARRAY_JOB_ID")):
                found.append(process)
        return found

    def cancel_what_is_left(self) -> None:
        """After the tests: no job of theirs keeps running (a failed test may leave one behind)."""
        if self.submitted:
            self.command("scancel", *map(str, self.submitted), check=False)


def environ_of(process: psutil.Process) -> dict[str, str]:
    """The process's environment (SLURMD_NODENAME says its node), or {} once it has exited."""
    try:
        return process.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def start_cluster() -> Cluster | str:
    """The running cluster (started if it was not), or why there is none."""
    if not shutil.which("slurmctld"):
        return ("SLURM is not installed: scripts/local_slurm.sh start installs it (as root; otherwise it says "
                "which packages to install) and starts a two-node cluster on this machine")
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        return f"scripts/local_slurm.sh start failed: {(done.stderr + done.stdout).strip()}"
    conf = subprocess.run(["bash", str(CLUSTER_SCRIPT), "env"], capture_output=True, text=True, check=True).stdout
    return Cluster(conf.strip().split("=", 1)[1])
