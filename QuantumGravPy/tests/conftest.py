"""Shared fixtures: a tiny config (seconds per run on 2 CPU cores), one data cache per session, the CLI."""

import logging
import os
import subprocess
from pathlib import Path

import pytest

# One thread per process, set before torch is imported: `make test` runs two workers on two cores and every
# process a test starts inherits this, so torch's default (a thread per core in each of them) only adds
# contention. The notebooks' stored outputs are the same with one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import QuantumGrav as QG  # noqa: E402

os.environ.setdefault("WANDB_MODE", "offline")  # no test may ever reach the network
os.environ.setdefault("WANDB_SILENT", "true")
REPO = Path(__file__).resolve().parents[2]

# No figures and no baselines: drawing them (and importing matplotlib and scikit-learn in every new process)
# cost more CPU than the tiny training itself. The tests of figures and baselines switch them on
# (ALL_RESULTS); the default (both on) is tested end to end by the notebooks and the documented commands.
# A tiny model, written out in full: the library's default model is the default job's (TransformerConv, 3 x 128,
# both directions, the order invariants in the head), which would cost the suite minutes; and a flat learning
# rate, which the tests' expectations were written for (the tests of schedules set their own).
TINY = {
    "training": {"seed": 7, "device": "cpu", "num_epochs": 3, "batch_size": 8, "progress_bar": False,
                 "optimizer_kwargs": {"lr": 5.0e-3}, "scheduler_type": None, "figures": False},
    "model": {"conv": QG.config.yaml_io.resolve_pyobject("torch_geometric.nn.GraphConv"), "conv_kwargs": {},
              "hidden_channels": [16, 16], "head_hidden": [16], "dropout": 0.0, "norm": "batch",
              "directions": "forward", "graph_features": False, "pooling": "mean_max"},
    "validation": {"batch_size": 16},
    "testing": {"batch_size": 16, "baselines": False},
    "early_stopping": {"patience": 10},
    "data": {"num_samples": 90, "n_min": 16, "n_max": 24, "split": [0.6, 0.2, 0.2], "seed": 3},
    "parallel": {"timeout_s": 30},
}

ALL_RESULTS = {"training.figures": True, "testing.baselines": True}

# The files that take longest (pytest --durations on a 2-core machine), heaviest first. `make test` hands whole
# files to its workers in collection order (--dist loadfile --no-loadscope-reorder); a long file handed out
# last would keep one worker busy while the others idle. Files not named here follow, in their own order.
LONGEST_FIRST = ("test_slurm.py", "test_restarts.py", "test_docs.py", "test_launchers.py", "test_lifeline.py",
                 "06_fault_tolerance.ipynb", "test_tune.py", "test_ddp.py", "test_notebooks.py", "test_site.py",
                 "03_ddp_by_hand.ipynb", "test_standalone_example.py", "test_your_own_data.py", "test_teardown.py",
                 "test_fault_tolerance.py")


# The files that `make test-fast` leaves out (marked full_suite): they start pools of fresh interpreters (DDP
# jobs, launchers, torchrun, studies, restarts), need the SLURM cluster or a browser, or execute notebooks and
# the docs' commands. What is left covers every module in under 3 minutes on 2 cores; `make test` runs all.
FULL_SUITE_ONLY = ("test_slurm.py", "test_slurm_tune.py", "test_site.py", "test_docs.py", "test_notebooks.py",
                   "test_notebook_logging.py", "test_notebook_test_mode.py", "test_restarts.py", "test_launchers.py",
                   "test_lifeline.py", "test_teardown.py", "test_tune.py", "test_ddp.py", "test_fault_tolerance.py",
                   "test_startup.py", "test_study_located_blocks.py")


def pytest_collection_modifyitems(items):
    position = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: position.get(item.path.name, len(position)))  # stable: a file keeps its order
    for item in items:
        if item.path.name in FULL_SUITE_ONLY or item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.full_suite)


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def slurm_cluster():
    """The local two-node SLURM cluster (slurm_jobs.py, scripts/local_slurm.sh), started once per test run if it
    is not up. Skips without SLURM, with the reason; under CI (CI=true) a missing cluster fails instead."""
    import slurm_jobs

    cluster = slurm_jobs.start_cluster()
    if isinstance(cluster, str):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true needs the local SLURM cluster (.ci/run starts it): {cluster}")
        pytest.skip(cluster)
    yield cluster
    cluster.cancel_what_is_left()


@pytest.fixture
def tiny_config(tmp_path, data_root):
    """Returns a function: tiny_config(overrides...) -> validated config writing under tmp_path."""

    def make(overrides: dict | None = None) -> dict:
        base = QG.apply_overrides(TINY, {"training.path": str(tmp_path / "runs"), "data.root": str(data_root)})
        return QG.load_config(base, overrides or {})

    return make


class _Collect(logging.Handler):
    def __init__(self, level: int):
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def collect_log():
    """collect_log(logger_name, level="WARNING") -> the list that logger's messages land in during
    this test, whatever setup_logging did to the handlers before."""
    attached = []

    def collect(name: str, level: str = "WARNING") -> list[str]:
        log, handler = logging.getLogger(name), _Collect(logging.getLevelName(level))
        log.addHandler(handler)
        attached.append((log, handler))
        return handler.messages

    yield collect
    for log, handler in attached:
        log.removeHandler(handler)


@pytest.fixture
def cli_in_process(monkeypatch, capsys):
    """``cli_in_process(*args, cwd=...)``: ``python -m QuantumGrav ARGS`` as ``cli.main`` in this process (the exit
    code it returns, what it printed), without the seconds a new interpreter needs to import torch. That
    ``__main__`` turns the code into the exit status without a traceback is checked once, in a real process."""
    from QuantumGrav.cli import main

    def run(*args, cwd):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run
