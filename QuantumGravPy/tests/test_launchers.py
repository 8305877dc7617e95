"""Every way users start a job trains to the same result for the same seed.

Two torchrun 'nodes' on this machine and the legacy torch.distributed.launch against ``QG.launch`` called
from the test's process. The documented launchers (torchrun, the spawning script, `python -m QuantumGrav
train --nproc 2`) are compared on the runs of the documents' own commands (test_docs.py), the notebook/papermill
launcher in test_notebooks.py.
"""

import csv
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject
from QuantumGrav.jobs.launcher import _supervise
from conftest import REPO, TINY

LIBRARY = str(Path(QG.__file__).resolve().parents[1])  # the tree under test, not another installed one

SCRIPT = REPO / "QuantumGravPy" / "examples" / "train_ddp_standalone.py"
EPOCHS = 2


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A config file for the tiny job and a function that runs a command and returns its metrics."""
    folder = tmp_path_factory.mktemp("launchers")
    config = QG.apply_overrides(TINY, {"training.path": str(folder / "runs"), "training.num_epochs": EPOCHS,
                                       "data.root": str(folder / "data")})
    config_path = folder / "tiny.yaml"
    config_path.write_text(QG.dump_config(config))

    def run(name: str, command: list[str]):
        done = subprocess.run(command + run.arguments(name), cwd=REPO, env=run.env, capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        with open(folder / "runs" / name / "metrics.csv", newline="") as f:
            return list(csv.DictReader(f)), done

    run.arguments = lambda name: ["--config", str(config_path), "--set", f"training.run_name={name}"]
    run.env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    run.config_path = config_path
    return run


def _same_training(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) == EPOCHS
    for row_a, row_b in zip(a, b):
        for key in ("train_loss", "val_loss", "val_accuracy"):
            assert float(row_a[key]) == pytest.approx(float(row_b[key]), rel=1e-5), key


@pytest.fixture(scope="module")
def reference(job):
    """The same job on 2 processes started by ``QG.launch`` from this process (its workers forked from the
    test process's server, which may have started already: no fresh interpreter). The standalone script's own
    ``--nproc 2`` is the same call, run as documented by test_docs.py."""
    result = QG.launch(QG.load_config(job.config_path, {"training.run_name": "launched"}), nproc=2)
    with open(Path(result["run_dir"]) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_two_torchrun_nodes_match(job, reference):
    """Two launcher processes with node ranks 0 and 1 stand in for two nodes sharing a filesystem."""
    common = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
              "--master_addr=127.0.0.1", f"--master_port={QG.find_free_port()}"]
    node1 = subprocess.Popen(common + ["--node_rank=1", str(SCRIPT), *job.arguments("two-nodes")], cwd=REPO,
                             env=job.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        rows, _ = job("two-nodes", common + ["--node_rank=0", str(SCRIPT)])
        output, _ = node1.communicate(timeout=120)
    finally:
        node1.kill()
    assert node1.returncode == 0, output[-3000:]
    _same_training(rows, reference)


def test_legacy_torch_distributed_launch_still_works(job, reference):
    rows, _ = job("legacy", [sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node=2",
                             f"--master_port={QG.find_free_port()}", str(SCRIPT)])
    _same_training(rows, reference)


def test_torchrun_job_with_a_failing_rank_exits_with_the_rank_and_error(job):
    env = {**job.env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), LIBRARY])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={QG.find_free_port()}", str(SCRIPT), *job.arguments("torchrun-fails"),
                           "--set", "criterion=!pyobject ddp_helpers.loss_failing_on_rank_1",
                           "--set", "parallel.timeout_s=20"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    assert "[RANK 1]" in done.stderr and "simulated failure in the loss on rank 1" in done.stderr


def test_each_launch_hands_its_workers_the_environment_of_that_moment(tiny_config, monkeypatch):
    """Workers are forked from a server that started with the first launch (distributed.worker_context);
    a variable set between two launches (as a notebook does) must still reach the second one's workers."""
    import own_data_helpers  # noqa: F401 - importable by the workers, as data.type needs

    config = tiny_config({"data.type": resolve_pyobject("own_data_helpers.SetsSizedByTheEnvironment"),
                          "task.type": "binary", "training.num_epochs": 1, "data.split": [0.5, 0.25, 0.25]})
    num_test = []
    for num_sets in (20, 40):
        monkeypatch.setenv("QG_TEST_NUM_SETS", str(num_sets))
        result = QG.launch(QG.apply_overrides(config, {"training.run_name": f"sets{num_sets}"}), nproc=2)
        num_test.append(result["test"]["num_test"])
    assert num_test == [5, 10]


def test_an_interrupt_of_the_launching_process_stops_every_worker(job, tmp_path):
    """A kernel interrupt is SIGINT to the process that called QG.launch: no worker may survive it."""
    import signal

    import psutil

    script = tmp_path / "notebook_like.py"
    # Early stopping off: the tiny job (patience 10) could end by itself before the SIGINT where this test lags.
    long_run = {"training.num_epochs": 500, "early_stopping.enabled": False}
    # SIGINT raises KeyboardInterrupt, as in a kernel, also where the suite runs in a shell's background (whose
    # jobs ignore SIGINT, and so would this script); a parent that does not end prints its stacks on SIGUSR1.
    script.write_text("import faulthandler, signal, sys\nimport QuantumGrav as QG\n\n"
                      "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                      "faulthandler.register(signal.SIGUSR1)\nif __name__ == '__main__':\n"
                      f"    QG.launch(QG.load_config(sys.argv[1], {long_run!r}), nproc=2)\n")
    parent = subprocess.Popen([sys.executable, str(script), job.arguments("interrupted")[1]], cwd=tmp_path,
                              env=job.env, stderr=subprocess.PIPE, text=True)
    try:
        for line in parent.stderr:  # rank 0 logs each epoch: the workers are training now
            if "epoch   0" in line:
                break
        # The rest is read on: a pipe left full would block the job's next write, and a failure shows it.
        rest = []
        threading.Thread(target=lambda: rest.extend(parent.stderr), daemon=True).start()
        workers = psutil.Process(parent.pid).children(recursive=True)
        assert len(workers) >= 2
        parent.send_signal(signal.SIGINT)
        try:
            parent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            parent.send_signal(signal.SIGUSR1)
            time.sleep(2)
            alive = [f"{p.pid} {p.info['status']}" for p in psutil.process_iter(["status"]) if p in workers]
            pytest.fail(f"still running 60 s after SIGINT; workers alive: {alive}; its stderr since epoch 0:\n"
                        + "".join(rest)[-5000:])
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == [], f"workers left running: {alive}"
        assert parent.returncode != 0
    finally:
        parent.kill()


class _ExitedProcess:
    """Stands in for a worker process that has already exited with ``exitcode``."""

    def __init__(self, rank: int, exitcode: int):
        self.name, self.exitcode = f"rank{rank}", exitcode


class _LateQueue:
    """A result queue whose one message arrives only after ``delay_polls`` empty polls."""

    def __init__(self, message: tuple | None, delay_polls: int):
        self.message, self.polls_left = message, delay_polls

    def get(self, timeout: float):
        if self.message is None or self.polls_left > 0:
            self.polls_left -= 1
            time.sleep(min(timeout, 0.05))
            raise queue.Empty
        message, self.message = self.message, None
        return message


def test_supervisor_reports_a_dead_ranks_error_that_arrives_after_its_exit():
    error = ("error", 1, "RuntimeError: boom", "Traceback ...", False)
    with pytest.raises(QG.TrainingFailed, match="rank 1 failed: RuntimeError: boom"):
        _supervise([_ExitedProcess(0, -15), _ExitedProcess(1, 1)], _LateQueue(error, delay_polls=3))


def test_supervisor_names_a_rank_killed_without_reporting():
    with pytest.raises(QG.TrainingFailed, match=r"rank 1 failed: process exited with code -9 without reporting"):
        _supervise([_ExitedProcess(0, None), _ExitedProcess(1, -9)], _LateQueue(None, 0))


def test_a_worker_that_reported_success_but_never_exits_is_stopped_with_a_warning(monkeypatch, collect_log):
    import multiprocessing

    from QuantumGrav.jobs import launcher

    monkeypatch.setattr(launcher, "EXIT_GRACE_S", 1.0)
    warnings = collect_log("QuantumGrav.launch")
    context = multiprocessing.get_context("spawn")
    exits = context.Process(target=time.sleep, args=(0,), name="rank0")
    stuck = context.Process(target=time.sleep, args=(600,), name="rank1")  # a teardown that never ends
    for process in (exits, stuck):
        process.start()
    results = queue.Queue()
    results.put(("ok", 0, {"test": "rank 0's result"}))
    results.put(("ok", 1, None))
    try:
        assert _supervise([exits, stuck], results) == {"test": "rank 0's result"}
        assert not stuck.is_alive()
        assert any("rank 1 reported success but had not exited" in m for m in warnings), warnings
    finally:
        stuck.kill()


def _stand_ins(tmp_path: Path, scripts: dict[str, str]) -> str:
    """Write each ``name: bash body`` as an executable in tmp_path/bin; returns a PATH that finds them first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_on_gpu_nodes_the_slurm_script_starts_one_process_per_allocated_gpu(tmp_path):
    """The part of configs/slurm_ddp.sbatch that the local cluster (test_slurm.py: CPU nodes, run for real)
    cannot run here: processes per node from the GPUs SLURM allocated, and each torchrun's cores. Stand-ins
    for scontrol, srun (two nodes: it runs its command with SLURM_NODEID 0 and 1), python (the config check)
    and torchrun record what they are given."""
    stand_ins = {
        "scontrol": 'printf "gpu-a\\ngpu-b\\n"',
        "srun": 'while [ "${1#--}" != "$1" ]; do shift; done\n'
                'for node in 0 1; do SLURM_NODEID=$node "$@" || exit $?; done',
        "python": 'printf "%s\\n" "$@" > "$OUT/check.args"',
        "torchrun": 'printf "%s\\n" "$SRUN_CPUS_PER_TASK" "$@" > "$OUT/node$SLURM_NODEID.args"',
    }
    env = {"PATH": _stand_ins(tmp_path, stand_ins), "OUT": str(tmp_path), "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_ID": "123456", "SLURM_NNODES": "2", "SLURM_CPUS_PER_TASK": "16", "SLURM_GPUS_ON_NODE": "4",
           "CONFIG": "my configs/run 1.yaml"}
    done = subprocess.run(["bash", str(REPO / "configs" / "slurm_ddp.sbatch"), "--set", "training.num_epochs=3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    arguments = ["--config", "my configs/run 1.yaml", "--set", "training.num_epochs=3"]
    assert (tmp_path / "check.args").read_text().splitlines() == ["-m", "QuantumGrav", "train", "--check",
                                                                  "--nproc", "4", *arguments]
    for node in (0, 1):
        args = (tmp_path / f"node{node}.args").read_text().splitlines()
        assert args == ["16", "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=4", "--master_addr=gpu-a",
                        "--master_port=13456", "--rdzv-id=quantumgrav-123456", "--max-restarts=1",
                        "QuantumGravPy/examples/train_ddp_standalone.py", *arguments]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a CUDA GPU says")
def test_train_check_validates_the_config_and_this_machines_devices_without_training(tmp_path, capsys):
    """What the SLURM script runs once before srun (``train --check``): ready, or the error with exit code 2."""
    from QuantumGrav import cli

    config = tmp_path / "job.yaml"
    config.write_text(QG.dump_config(QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs")})))
    assert cli.main(["train", "--check", "--config", str(config), "--nproc", "3"]) == 0
    assert capsys.readouterr().out == f"{config}: ready: 3 process(es) on cpu (gloo), 3 epochs\n"
    assert cli.main(["train", "--check", "--config", str(config), "--set", "training.device=cuda"]) == 2
    assert capsys.readouterr().err == ("error: training.device: 'cuda' was asked for but no CUDA GPU is visible; "
                                       "use device: auto (the GPUs where there are some, else the CPU) or cpu, or "
                                       "check CUDA_VISIBLE_DEVICES\n")
    assert not (tmp_path / "runs").exists(), "nothing is written"
