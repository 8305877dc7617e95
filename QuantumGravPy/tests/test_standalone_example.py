"""The standalone DDP example, run the way its users type it.

``QuantumGravPy/examples/train_ddp_standalone.py`` under torchrun in ``QuantumGravPy/`` with no arguments (the
brief's command), under torchrun from the repository root on 3 processes, and with ``python ... --nproc 2``
(mp.spawn) from elsewhere: each trains the repository's default config (in test mode: the smoke switch), every
rank says where it stopped, and the run lands in the repository's ``runs/``. Bad input ends with one ``error:``
line and exit code 2. Each run uses a copy of the script and the default config in a repository-shaped folder of
its own, with the library of the tree under test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import QuantumGrav as QG
from conftest import REPO

pytestmark = pytest.mark.full_suite  # fresh interpreters and torchrun jobs: about a minute in all

SCRIPT = Path("QuantumGravPy") / "examples" / "train_ddp_standalone.py"
CONFIG = Path("configs") / "train_ddp.yaml"
LIBRARY = str(Path(QG.__file__).resolve().parents[1])
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
# Early stopping that fires within a few epochs of the smoke-test data, on its own patience.
EARLY_STOPPING = ["--set", "training.num_epochs=40", "--set", "early_stopping.patience=1",
                  "--set", "early_stopping.window=1"]


@pytest.fixture
def repository(tmp_path) -> Path:
    """A folder shaped like the repository: the example and the config it finds by default."""
    for relative in (SCRIPT, CONFIG):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    return tmp_path


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": LIBRARY, "QUANTUMGRAV_SMOKE_TEST": "1", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def torchrun(nproc: int) -> list[str]:
    return [TORCHRUN, f"--nproc_per_node={nproc}", f"--master_port={QG.find_free_port()}"]


def stop_lines(stderr: str) -> dict[int, tuple[int, str]]:
    """rank -> (epoch, reason) of each rank's 'training stopped after epoch E: REASON' line."""
    found = re.findall(r"\[RANK (\d+)\] .*training stopped after epoch (\d+): (.*)", stderr)
    assert len(found) == len({rank for rank, _, _ in found}), f"a rank said it twice:\n{stderr[-3000:]}"
    return {int(rank): (int(epoch), reason) for rank, epoch, reason in found}


def the_run(repository: Path) -> dict:
    (run_dir,) = [path for path in (repository / "runs").iterdir() if path.is_dir() and not path.name.startswith(".")]
    return json.loads((run_dir / "summary.json").read_text())


def test_torchrun_in_quantumgravpy_without_arguments_trains_the_repositorys_default_job(repository):
    done = run(torchrun(2) + [str(SCRIPT.relative_to("QuantumGravPy"))], cwd=repository / "QuantumGravPy")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert set(stop_lines(done.stderr)) == {0, 1}
    assert len(set(stop_lines(done.stderr).values())) == 1, "every rank stopped at the same epoch, for one reason"
    assert "joined the process group: rank 1 of 2 (gloo)" in done.stderr
    assert done.stdout.count("=== QuantumGrav run summary ===") == 1, "rank 0 alone prints it"
    summary = the_run(repository)  # in the repository's runs/, as `make train` writes them
    assert summary["world_size"] == 2 and summary["num_test"] > 0
    assert not (repository / "QuantumGravPy" / "runs").exists() and not (repository / "QuantumGravPy" / "data").exists()
    assert "Traceback" not in done.stderr


def test_torchrun_from_the_root_on_three_processes_stops_every_rank_at_the_same_epoch_by_early_stopping(repository):
    done = run(torchrun(3) + [str(SCRIPT), *EARLY_STOPPING], cwd=repository)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    stops = stop_lines(done.stderr)
    assert set(stops) == {0, 1, 2}
    (epoch, reason), = set(stops.values())
    assert reason.startswith("early stopping") and 0 < epoch < 39, stops
    summary = the_run(repository)
    assert summary["world_size"] == 3 and summary["stopped_at_epoch"] == epoch
    assert summary["stopped_by"] is not None


def test_python_with_nproc_2_spawns_the_processes_itself(repository, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # neither the repository nor QuantumGravPy/
    done = run([sys.executable, str(repository / SCRIPT), "--nproc", "2", *EARLY_STOPPING], cwd=elsewhere)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    stops = stop_lines(done.stderr)
    assert set(stops) == {0, 1} and len(set(stops.values())) == 1
    assert the_run(repository)["world_size"] == 2
    assert list(elsewhere.iterdir()) == []


def test_sigterm_to_the_spawning_script_checkpoints_every_rank_and_exits_143(repository):
    """A scheduler's notice to `python ... --nproc 2`: the script passes SIGTERM on to its ranks, which checkpoint
    at the same step and stop; the script exits with 143, as the command line does, and nothing is left running."""
    command = [sys.executable, str(SCRIPT), "--nproc", "2", "--set", "training.num_epochs=10000",
               "--set", "early_stopping.enabled=false", "--set", "training.run_name=preempted"]
    env = {**os.environ, "PYTHONPATH": LIBRARY, "QUANTUMGRAV_SMOKE_TEST": "1", "OMP_NUM_THREADS": "1"}
    job = subprocess.Popen(command, cwd=repository, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = repository / "runs" / "preempted" / "metrics.csv"
    try:
        deadline = time.monotonic() + 240
        while not (metrics.exists() and len(metrics.read_text().splitlines()) > 2):  # two epochs trained
            assert job.poll() is None and time.monotonic() < deadline, job.communicate()[1][-3000:]
            time.sleep(0.2)
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 143, err[-3000:]
    stopped = re.findall(r"\[RANK (\d)\] .*stopped: stopped on SIGTERM after checkpointing epoch (\d+) \(batch (\d+)\)", err)
    assert sorted(rank for rank, _, _ in stopped) == ["0", "1"], err[-3000:]
    assert len({(epoch, batch) for _, epoch, batch in stopped}) == 1, "every rank stopped at the same step"
    assert (repository / "runs" / "preempted" / "checkpoints" / "last.pt").is_file()


def load_script(repository: Path):
    """The script as a module (its main() takes an argument list), from the repository-shaped copy."""
    spec = importlib.util.spec_from_file_location("train_ddp_standalone", repository / SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arguments, message", [
    (["--config", "missing.yaml"], "error: config file 'missing.yaml' does not exist"),
    (["--set", "training.batch_sise=3"], "training.batch_sise: unknown key; did you mean 'batch_size'?"),
    (["--nproc", "0"], "error: train_ddp_standalone.py: --nproc: expected an integer >= 1, got 0"),
    (["--epochs", "3"], "error: train_ddp_standalone.py: unrecognized arguments: --epochs 3"),
])
def test_bad_input_is_one_error_and_exit_code_2(repository, arguments, message, capsys, monkeypatch):
    monkeypatch.chdir(repository)
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    assert load_script(repository).main(arguments) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in err and out == "", err
    assert not (repository / "runs").exists(), "nothing is written"


def test_bad_input_under_torchrun_is_said_once_by_rank_0(repository):
    """Every rank finds it (each checks the config before joining the group) and rank 0 alone says it; the first
    worker to exit says 2 in torchrun's own report of the failed workers, after which torchrun exits with 1."""
    done = run(torchrun(2) + [str(SCRIPT), "--set", "training.batch_sise=3"], cwd=repository)
    assert done.returncode != 0
    assert done.stderr.count("training.batch_sise: unknown key") == 1, done.stderr
    assert "exitcode  : 2" in done.stderr, done.stderr[-3000:]
    assert not (repository / "runs").exists()


def test_the_usage_names_the_script_and_its_options(repository, capsys):
    with pytest.raises(SystemExit) as exited:
        load_script(repository).main(["--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: train_ddp_standalone.py [-h] [--config CONFIG] [--merge YAML]")
    assert "--nproc" in usage and "--resume RUN_DIR" in usage
