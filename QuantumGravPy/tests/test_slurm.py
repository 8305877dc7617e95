"""configs/slurm_ddp.sbatch on a real SLURM cluster: every way a cluster stops or starts a job, for real.

The local cluster (scripts/local_slurm.sh; the ``slurm_cluster`` fixture starts it once per test run) has two CPU
nodes, n1 and n2, on this machine. The script runs as shipped, with command-line overrides only (the sbatch options
of a CPU partition, ``--export``, the arguments of ``python -m QuantumGrav train`` after the script), one process
per node, on the tiny data. The loss of the jobs (pausing_loss.py) holds every rank at one training step, inside an
epoch, until the test has stopped the job there: the signal is SLURM's own (``scontrol requeue``, ``scancel``,
``scancel --signal=USR1 --batch`` for the time-limit notice) or a ``kill -9``, and it lands where the test says.

Two jobs are stopped several times each (a module fixture drives each, the tests read what it saw):
- requeued: the time-limit notice in epoch 1, ``scontrol requeue`` in epoch 2, then it runs to the end (W&B on);
- cancelled: ``scancel`` in epoch 1; the same sbatch command again continues the run, loses its second node's
  torchrun (``kill -9``) in epoch 2, and a requeue finishes it.
"""

import csv
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.runs.wandb_files import read_offline_runs
from conftest import TINY
from slurm_jobs import ENDED, environ_of

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

SCRIPT = "configs/slurm_ddp.sbatch"
# A CPU partition, as the script's header says: no GPU, one CPU per task, so one process per node.
CPU_NODES = ["--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=0", "--cpus-per-task=1"]
EPOCHS = 4
PAUSE_AT = 6  # each attempt's 6th training step: inside epoch 1 of a new run (4 steps per epoch and process)
TIMEOUT_S = 30  # parallel.timeout_s of the jobs: a rank waiting for a lost peer gives up after it
KILL_WAIT_S = 30  # SLURM's KillWait (default): SIGKILL to what is left of a job that long after SIGTERM
JOB_S = 300  # an attempt, queueing and start-up included, on a busy 2-core machine


class Jobs:
    """Submits the tiny job to the cluster and follows it: its output, its pauses, its run directories."""

    def __init__(self, cluster, folder: Path, data_root: Path):
        self.cluster, self.folder = cluster, folder
        self.pauses = folder / "pauses"
        self.pauses.mkdir()
        config = QG.apply_overrides(TINY, {
            "training.device": "auto", "training.num_epochs": EPOCHS, "early_stopping.patience": 100,
            "training.path": str(folder / "runs"), "data.root": str(data_root), "parallel.timeout_s": TIMEOUT_S,
            "criterion": QG.config.yaml_io.resolve_pyobject("pausing_loss.cross_entropy")})
        self.config = folder / "job.yaml"
        self.config.write_text(QG.dump_config(QG.load_config(config)))
        self.env = {"QG_TEST_PAUSE_DIR": str(self.pauses), "QG_TEST_PAUSE_AT": str(PAUSE_AT)}

    def submit(self, *script_args: str, options: tuple[str, ...] = ()) -> int:
        return self.cluster.submit(SCRIPT, *script_args, env=self.env,
                                   options=[*CPU_NODES, f"--output={self.folder}/slurm-%j.out", *options])

    def output(self, job: int) -> str:
        return (self.folder / f"slurm-{job}.out").read_text()

    def paused(self, job: int, restart: int) -> dict[int, tuple[str, int]]:
        """Waits until both ranks of the job's attempt ``restart`` (SLURM's requeue count) hold at the pause;
        returns {rank: (node, pid)}."""
        markers = [self.pauses / f"{job}.{restart}.0.rank{rank}" for rank in (0, 1)]
        deadline = time.monotonic() + JOB_S
        while not all(m.exists() for m in markers):
            state = self.cluster.job(job)["JobState"]
            if state in ENDED or time.monotonic() > deadline:
                raise AssertionError(f"job {job} ({state}): attempt {restart} never paused\n{self.output(job)[-5000:]}")
            time.sleep(0.2)
        return {rank: (node, int(pid)) for rank, node, pid in (m.read_text().split() for m in markers)
                for rank in [int(rank)]}

    def wait_for_sigterm(self, job: int, restart: int, rank: int) -> None:
        """Until the rank, held at its pause in the job's attempt ``restart``, has got SIGTERM."""
        marker = self.pauses / f"{job}.{restart}.0.rank{rank}.terminated"
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, f"rank {rank} of job {job} never got SIGTERM"
            time.sleep(0.05)

    def release(self, job: int, restart: int) -> None:
        """The attempt ``restart`` goes on (or, not started yet, will not pause at all)."""
        (self.pauses / f"{job}.{restart}.0.go").touch()


def _run_dirs(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if p.is_dir() and p.name != ".jobs") if runs.is_dir() else []


def _epochs(run_dir: Path) -> list[int]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [int(row["epoch"]) for row in csv.DictReader(f)]


def _stopped_at(output: str, rank: int) -> tuple[int, int]:
    """(epoch, batch) at which the rank said it checkpointed and stopped on SIGTERM."""
    found = re.findall(rf"\[RANK {rank}\].*stopped on SIGTERM after checkpointing epoch (\d+) \(batch (\d+)\)", output)
    assert len(found) == 1, f"rank {rank} stopped {len(found)} times:\n{output[-5000:]}"
    return int(found[0][0]), int(found[0][1])


@pytest.fixture(scope="module")
def jobs(slurm_cluster, tmp_path_factory, data_root):
    return Jobs(slurm_cluster, tmp_path_factory.mktemp("slurm"), data_root)


@pytest.fixture(scope="module")
def requeued(jobs):
    """One job, W&B offline on, stopped twice: the time-limit notice (what --signal=B:USR1@180 sends, now)
    inside epoch 1, ``scontrol requeue`` inside epoch 2; then it runs to the end. The config comes in CONFIG
    (--export), as in the issue that asked for this test; processes per node follow --cpus-per-task."""
    runs = jobs.folder / "requeued"
    job = jobs.submit("--merge", "configs/logger/wandb_ddp.yaml", "--set", f"training.path={runs}",
                      options=(f"--export=ALL,CONFIG={jobs.config}",))
    first = jobs.paused(job, 0)
    # While the job holds: the same training, uninterrupted, on 2 processes of this machine.
    reference = QG.launch(QG.load_config(jobs.config, {"training.path": str(jobs.folder / "reference")}), nproc=2)
    jobs.cluster.command("scancel", "--signal=USR1", "--batch", str(job))
    second = jobs.paused(job, 1)
    jobs.release(job, 2)
    jobs.cluster.command("scontrol", "requeue", str(job))
    fields = jobs.cluster.wait_for_end(job, JOB_S, restarts=2)
    (run_dir,) = _run_dirs(runs)
    return SimpleNamespace(job=job, fields=fields, output=jobs.output(job), runs=runs, run_dir=run_dir,
                           first=first, second=second, reference=Path(reference["run_dir"]))


def test_sbatch_as_shipped_trains_on_two_cpu_nodes_in_one_run_directory(requeued):
    assert requeued.fields["JobState"] == "COMPLETED" and requeued.fields["ExitCode"] == "0:0", requeued.fields
    assert f"nodes=2 procs/node=1 master=n1:{10000 + requeued.job % 20000} restart=0" in requeued.output
    assert {rank: node for rank, (node, _) in requeued.first.items()} == {0: "n1", 1: "n2"}
    assert _run_dirs(requeued.runs) == [requeued.run_dir]
    assert sorted(p.name for p in (requeued.run_dir / "logs").iterdir()) == ["rank_0.log", "rank_1.log"]
    assert requeued.output.count("=== QuantumGrav run summary ===") == 1, "rank 0 alone prints it, at the end"


def test_the_time_limit_notice_checkpoints_every_rank_then_the_job_requeues_itself_and_continues(requeued):
    output = requeued.output
    assert output.count(f"time limit near: checkpointing, then requeueing job {requeued.job}") == 1
    epoch, batch = _stopped_at(output.split("restart=1")[0], rank=0)
    assert _stopped_at(output.split("restart=1")[0], rank=1) == (epoch, batch)
    # The signal came during the first batch of epoch 1 (the pause); the ranks learn of it at the next step.
    assert (epoch, batch) == (1, 2), "inside epoch 1, at the step after the pause"
    assert f"resuming {requeued.run_dir} at epoch 1, batch 2" in output


def test_scontrol_requeue_inside_an_epoch_continues_the_run_with_every_epoch_once_and_one_wandb_run(requeued):
    assert requeued.fields["Restarts"] == "2"
    after_notice = requeued.output.split("restart=1")[1].split("restart=2")[0]
    epoch, batch = _stopped_at(after_notice, rank=0)
    assert _stopped_at(after_notice, rank=1) == (epoch, batch) and 0 < batch
    assert f"resuming {requeued.run_dir} at epoch {epoch}, batch {batch}" in requeued.output
    assert _epochs(requeued.run_dir) == list(range(EPOCHS))
    final, uninterrupted = (torch.load(d / "checkpoints" / "last.pt", weights_only=True)["model"]
                            for d in (requeued.run_dir, requeued.reference))
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(final[name], tensor, rtol=1e-6, atol=1e-6, msg=name)
    # W&B: every record on disk belongs to one run, and its history has every epoch once, as metrics.csv has.
    wandb_runs = read_offline_runs(requeued.run_dir)
    assert len({run["id"] for run in wandb_runs if run["id"]}) == 1, wandb_runs
    history = [row for run in wandb_runs for row in run["history"] if "train_loss" in row]
    assert [row["epoch"] for row in history] == list(range(EPOCHS))


@pytest.fixture(scope="module")
def cancelled(jobs):
    """A named run (so that a new submission of the same command continues it), NPROC_PER_NODE as the issue
    gave it: ``scancel`` inside epoch 1; the same command again, whose second node's torchrun is killed
    (``kill -9``) inside epoch 2; then ``scontrol requeue`` of that job, which runs to the end."""
    runs = jobs.folder / "cancelled"
    command = ("--config", str(jobs.config), "--set", f"training.path={runs}", "--set", "training.run_name=named")
    options = ("--export=ALL,NPROC_PER_NODE=1",)
    cluster = jobs.cluster
    job = jobs.submit(*command, options=options)
    jobs.paused(job, 0)
    before_scancel = cluster.processes(job)
    nodes = {environ_of(p).get("SLURMD_NODENAME") for p in before_scancel}
    cluster.command("scancel", str(job))
    cancel = cluster.wait_for_end(job, JOB_S)
    in_epoch = torch.load(runs / "named" / "checkpoints" / "last.pt", weights_only=True)["in_epoch"]

    again = jobs.submit(*command, options=options)
    jobs.paused(again, 0)
    before_kill = cluster.processes(again)
    (torchrun_n2,) = [p for p in before_kill if environ_of(p).get("SLURMD_NODENAME") == "n2"
                      and any(arg.endswith("torchrun") for arg in p.cmdline())]
    killed_at = time.monotonic()
    torchrun_n2.kill()
    # Its worker gets SIGTERM at once (it asked for it when its torchrun dies); once it has, the other ranks
    # train on, as they would when a node goes down. (Released before, rank 1 could finish the epoch first.)
    jobs.wait_for_sigterm(again, 0, rank=1)
    jobs.release(again, 0)
    lost = cluster.wait_for_end(again, TIMEOUT_S + KILL_WAIT_S + 60)
    lost_after_s = time.monotonic() - killed_at
    lost_output = jobs.output(again)
    jobs.release(again, 1)
    cluster.command("scontrol", "requeue", str(again))
    final = cluster.wait_for_end(again, JOB_S, restarts=1)
    return SimpleNamespace(runs=runs, run_dir=runs / "named", cancel=cancel, cancel_output=jobs.output(job),
                           in_epoch=in_epoch, before_scancel=before_scancel, nodes=nodes, before_kill=before_kill,
                           lost=lost, lost_after_s=lost_after_s, lost_output=lost_output,
                           final=final, output=jobs.output(again))


def test_scancel_checkpoints_every_rank_and_leaves_no_process_on_either_node(cancelled):
    assert cancelled.cancel["JobState"] == "CANCELLED", cancelled.cancel
    assert {"n1", "n2"} <= cancelled.nodes, "the job ran on both nodes"
    assert [p for p in cancelled.before_scancel if p.is_running()] == []
    assert _stopped_at(cancelled.cancel_output, rank=0) == _stopped_at(cancelled.cancel_output, rank=1) == (1, 2)
    assert cancelled.in_epoch["epoch"] == 1 and cancelled.in_epoch["completed_batches"] == 2


def test_the_same_command_continues_a_cancelled_run(cancelled):
    assert f"resuming {cancelled.run_dir} at epoch 1, batch 2" in cancelled.lost_output


def test_a_lost_node_ends_the_job_in_bounded_time_and_a_requeue_finishes_the_run(cancelled):
    """The torchrun of node n2 killed (kill -9) while the job trains on: its worker is told (SIGTERM, from
    the library's stop_when_the_agent_dies) instead of training on unsupervised, every rank checkpoints at the
    next step, and srun (--kill-on-bad-exit) ends the step on both nodes; nothing of the job outlives it."""
    assert cancelled.lost["JobState"] == "FAILED", cancelled.lost
    assert cancelled.lost_after_s < TIMEOUT_S + KILL_WAIT_S, "bounded by the collective timeout and KillWait"
    assert [p for p in cancelled.before_kill if p.is_running()] == []
    epoch, batch = _stopped_at(cancelled.lost_output, rank=0)
    assert _stopped_at(cancelled.lost_output, rank=1) == (epoch, batch) and (epoch, batch) < (EPOCHS - 1, 0)
    assert f"resuming {cancelled.run_dir} at epoch {epoch}, batch {batch}" in cancelled.output.split("restart=1")[1]
    assert cancelled.final["JobState"] == "COMPLETED", cancelled.final
    assert _run_dirs(cancelled.runs) == [cancelled.run_dir]
    assert _epochs(cancelled.run_dir) == list(range(EPOCHS))


def test_a_config_error_is_one_message_and_exit_code_2_without_a_restart(jobs):
    """device: cuda on a CPU node (what the script hard-coded before): the check before srun says so, once."""
    runs = jobs.folder / "config-error"
    job = jobs.submit("--config", str(jobs.config), "--set", f"training.path={runs}",
                      "--set", "training.device=cuda")
    fields = jobs.cluster.wait_for_end(job, JOB_S)
    output = jobs.output(job)
    assert (fields["JobState"], fields["ExitCode"], fields["Restarts"]) == ("FAILED", "2:0", "0"), fields
    assert output.count("error: training.device: 'cuda' was asked for but no CUDA GPU is visible") == 1, output
    assert "[RANK" not in output and "torchrun" not in output, "no process of the job was started"
    assert not runs.exists()
