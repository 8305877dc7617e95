"""The shipped configs follow their own advice on the machine they run on, and the smoke test runs at one's own N
(issue 48, item 6).

``training.num_workers: auto`` is this process's share of the cores less one (as ``QG.launch`` shares the cores'
threads): configs/manifold_like.yaml asked for 2 workers and then warned, on a 2-core machine, that 2 is more than
its cores can serve. ``QUANTUMGRAV_SMOKE_TEST=1`` shrinks the data, an ``n_min``/``n_max`` the command sets too, and
names those with the one way to smoke-test one's own N.
"""

import json
import logging
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.common import processes
from QuantumGrav.training import advice as advice_module
from QuantumGrav.training.advice import config_advice
from QuantumGrav.training.loaders import make_loader

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(path for path in (REPO / "configs").glob("*.yaml") if path.name != "tune.yaml")


@pytest.mark.parametrize("cores, processes_", [(2, 1), (4, 2), (16, 2), (64, 4)])
@pytest.mark.parametrize("config", SHIPPED, ids=lambda path: path.name)
def test_no_shipped_config_trips_the_worker_advice(config, cores, processes_, monkeypatch):
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST", raising=False)
    sections = QG.load_config(config).sections
    found = config_advice(sections, processes_, "cpu", cpu_count=cores)
    assert not [line for line in found if "num_workers" in line], found


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # the cores are pretended; no worker starts
@pytest.mark.parametrize("cores, local_processes, expected", [(2, 1, 1), (8, 2, 3), (1, 1, 0), (64, 4, 15)])
def test_auto_workers_are_this_processs_share_of_the_cores_less_one(cores, local_processes, expected, monkeypatch):
    monkeypatch.setattr(processes, "usable_cpu_count", lambda: cores)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_processes))
    loader_section = QG.load_config({"training": {"num_workers": "auto"}}).sections.loaders.training
    loader = make_loader(list(range(4)), loader_section, None, torch.device("cpu"))
    assert loader.num_workers == expected and loader_section.num_workers == "auto"
    with pytest.raises(QG.ConfigError, match="training.num_workers: expected an integer >= 0 or auto"):
        QG.load_config({"training": {"num_workers": "all"}})


def test_the_command_gives_no_worker_advice_on_two_cores(cli_in_process, tmp_path, monkeypatch, caplog):
    """configs/manifold_like.yaml as shipped, on a machine of 2 cores: no advice about its workers (one worker)."""
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    monkeypatch.setattr(advice_module, "usable_cpu_count", lambda: 2)
    monkeypatch.setattr(processes, "usable_cpu_count", lambda: 2)
    done = cli_in_process("train", "--config", str(REPO / "configs" / "manifold_like.yaml"), "--set",
                          f"data.kwargs.path={tmp_path / 'kinds'}", "--set", f"training.path={tmp_path / 'runs'}",
                          "--set", "training.device=cpu", "--set", "testing.baselines=false", "--set",
                          "training.figures=false", "--set", "training.num_epochs=1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "num_workers" not in done.stderr + caplog.text


def test_the_smoke_test_names_the_n_it_shrinks_and_the_one_way_to_run_at_ones_own(cli_in_process, tmp_path,
                                                                                   monkeypatch, caplog):
    """Under the switch the command's n_min/n_max are shrunk too (documented commands at N = 256 must stay seconds),
    and the warning says so and how to smoke-test one's own N: without the switch, few sets and epochs."""
    monkeypatch.setenv("QUANTUMGRAV_SMOKE_TEST", "1")
    with caplog.at_level(logging.WARNING, logger="QuantumGrav.smoke_test"):
        config = QG.load_config(REPO / "configs" / "train.yaml", ["data.n_min=30", "data.n_max=34"])
    assert (config["data"]["n_min"], config["data"]["n_max"], config["data"]["num_samples"]) == (8, 12, 40)
    assert ("the command's data.n_min=30 and data.n_max=34 are shrunk too: to smoke-test your own N, unset the switch "
            "and set few sets (data.num_samples, data.kwargs.num_per_kind) and training.num_epochs instead") in caplog.text
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST")
    done = cli_in_process("train", "--config", str(REPO / "configs" / "train.yaml"), "--set",
                          f"data.root={tmp_path / 'data'}", "--set", f"training.path={tmp_path / 'runs'}",
                          "--set", "data.n_min=30", "--set", "data.n_max=34", "--set", "data.num_samples=40",
                          "--set", "training.num_epochs=1", "--set", "training.figures=false", "--set",
                          "testing.baselines=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((next((tmp_path / "runs").iterdir()) / "summary.json").read_text())
    low, high = summary["training_range"]["num_elements"]
    assert 30 <= low <= high <= 34
