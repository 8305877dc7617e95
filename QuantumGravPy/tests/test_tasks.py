"""A task is one type (issue 62): its class declares what the library asks of it and the registry names it, so a new
task is one class: here one defined in this file trains, resumes from its checkpoint and is applied to data by
``evaluate``; and no module but the registry writes a task's name."""

import ast
import csv

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.tasks import registry
from QuantumGrav.tasks.regression import RegressionTask

from conftest import REPO

LIBRARY = REPO / "QuantumGravPy" / "src" / "QuantumGrav"
BUILT_IN = ("multiclass", "binary", "regression", "node_binary", "relation_binary")


def modules_naming(names) -> dict[str, set[str]]:
    """Library module -> the task names it holds as string constants (docstrings and prose left out)."""
    found = {}
    for path in LIBRARY.rglob("*.py"):
        module = str(path.relative_to(LIBRARY))
        constants = {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)}
        named = set(names) & constants
        if named:
            found[module] = named
    return found


def test_task_names_are_written_in_the_registry_alone():
    assert registry.task_names() == BUILT_IN
    assert modules_naming(BUILT_IN) == {"tasks/registry.py": set(BUILT_IN)}


class SprinkledDimension(RegressionTask):
    """A toy task: the dimension of the Minkowski space a set was sprinkled into, 0 for a set that is no sprinkling,
    read from ``own_data_helpers.UserCausalSets``' class index (its target reader); a value per set, so the
    regression family's loss and metrics."""

    summary = "the dimension a set was sprinkled into (0: none), read from the user's class index"
    DIMENSIONS = torch.tensor([2.0, 4.0, 0.0, 0.0])  # minkowski_2d, minkowski_4d, layered, percolation

    def target(self, y):
        return self.DIMENSIONS.to(y.device)[y.view(-1).long()].view(-1, 1)

    def target_problem(self, y):
        problem = self._one_value(y)
        if problem is None and (y.is_floating_point() or not 0 <= int(y) < len(self.DIMENSIONS)):
            return f"a {self.type} task reads a class index 0..{len(self.DIMENSIONS) - 1} in y, got {y.tolist()}"
        return problem


def test_a_task_of_one_class_trains_resumes_and_is_applied(tiny_config, tmp_path, monkeypatch):
    settings = {"data.type": QG.config.yaml_io.resolve_pyobject("own_data_helpers.UserCausalSets"),
                "data.kwargs": {"num_sets": 40}, "task.type": "toy_dimension", "training.num_epochs": 2,
                "training.run_name": "toy", "early_stopping.metric": "val_mae"}
    with pytest.raises(QG.ConfigError, match=r"task.type: expected one of 'auto', 'multiclass', .*got 'toy_dimension'"):
        tiny_config(settings)  # config validation reads the registry: no such task yet
    monkeypatch.setattr(registry, "TASKS", dict(registry.TASKS))  # registered for this test only
    task = registry.register_task("toy_dimension")(SprinkledDimension)
    config = tiny_config(settings)
    assert config["early_stopping"]["mode"] == "min" and "toy_dimension: the dimension" in registry.tasks_text()

    trainer = QG.Trainer(config)
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    assert type(trainer.task) is task and trainer.core_model.readout == "graph"
    best = torch.load(trainer.run_dir / "checkpoints" / "best.pt", weights_only=True)
    assert best["model_io"]["task"] == "toy_dimension"

    resumed = QG.Trainer(QG.apply_overrides(config, {"training.resume": str(trainer.run_dir),
                                                     "training.num_epochs": 3}))
    loaders = resumed.prepare_dataloaders()
    resumed.run_training(*loaders[:2])
    test = resumed.run_test(loaders[2])
    resumed.close()
    assert resumed.start_epoch == 2 and [row["epoch"] for row in resumed.history] == [0, 1, 2]
    truth = [float(task().target(resumed.dataset[i].y)) for i in resumed.split["test"]]
    assert {"test_mae", "test_rmse", "test_r2", "train_mean_mae"} <= set(test) and set(truth) <= {0.0, 2.0, 4.0}

    applied = QG.load_run(trainer.run_dir).evaluate(trainer.run_dir / "config.yaml", split="test")
    assert applied["task"] == "toy_dimension" and applied["count"] == test["num_test"]
    assert applied["mae"] == pytest.approx(test["test_mae"], rel=1e-5)
    with open(applied["predictions_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(float(row["truth"]) for row in rows) == sorted(truth)
