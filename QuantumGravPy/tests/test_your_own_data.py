"""Your own data, task and model: datasets from Python or the config, binary and regression tasks with
metrics that are exact under DDP, custom models, and one clear error for each bad input."""

import csv
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject
from QuantumGrav.tasks.binary import BinaryTask
from QuantumGrav.tasks.regression import RegressionTask

import own_data_helpers  # noqa: F401 - puts notebooks/ on sys.path (my_causal_sets)
from conftest import TINY
from own_data_helpers import small_sets

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MY_SETS = resolve_pyobject("my_causal_sets.MyCausalSets")
MY_MODEL = resolve_pyobject("my_causal_sets.GraphAndInvariantsGNN")
BINARY = {"data.type": MY_SETS, "data.kwargs": {"num_sets": 60, "n_min": 12, "n_max": 18},
          "task.type": "binary", "early_stopping.metric": "val_f1"}
# As configs/train_regression.yaml, tiny: no batch norm, a larger LR for the few steps.
REGRESSION = {"data.target": "myrheim_meyer_dimension", "early_stopping.metric": "val_rmse", "model.norm": "none",
              "training.num_epochs": 8, "data.num_samples": 200, "training.optimizer_kwargs": {"lr": 0.02}}


def _rows(run_dir):
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _totals_in_two_parts(task, outputs, target):
    """Totals summed over two 'ranks' holding different numbers of graphs."""
    loss = lambda o, t: task.default_loss(o, t)  # noqa: E731
    return sum(task.batch_totals(o, t, loss(o, t)) for o, t in ((outputs[:7], target[:7]), (outputs[7:], target[7:])))


# --------------------------------------------------------------------------- metrics
def test_binary_metrics_from_reduced_totals_equal_scikit_learn_on_the_whole_set():
    generator = torch.Generator().manual_seed(0)
    logits, target = torch.randn(30, 1, generator=generator), torch.randint(0, 2, (30, 1), generator=generator)
    task = BinaryTask(threshold=0.3)
    got = task.metrics(_totals_in_two_parts(task, logits, target.float()))
    predicted = (torch.sigmoid(logits) >= 0.3).long().view(-1).numpy()
    true = target.view(-1).numpy()
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(true, predicted))
    assert got["precision"] == pytest.approx(skm.precision_score(true, predicted))
    assert got["recall"] == pytest.approx(skm.recall_score(true, predicted))
    assert got["f1"] == pytest.approx(skm.f1_score(true, predicted))
    assert got["confusion"] == skm.confusion_matrix(true, predicted).tolist() and got["count"] == 30
    expected_loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target.float()).item()
    assert got["loss"] == pytest.approx(expected_loss, rel=1e-6)


def test_regression_metrics_from_reduced_totals_equal_scikit_learn_on_the_whole_set():
    generator = torch.Generator().manual_seed(1)
    target = 2 + torch.rand(25, 1, generator=generator, dtype=torch.float64)
    outputs = target + 0.1 * torch.randn(25, 1, generator=generator, dtype=torch.float64)
    task = RegressionTask()
    got = task.metrics(_totals_in_two_parts(task, outputs, target))
    true, predicted = target.view(-1).numpy(), outputs.view(-1).numpy()
    assert got["mae"] == pytest.approx(skm.mean_absolute_error(true, predicted))
    assert got["rmse"] == pytest.approx(np.sqrt(skm.mean_squared_error(true, predicted)))
    assert got["r2"] == pytest.approx(skm.r2_score(true, predicted))
    assert got["loss"] == pytest.approx(skm.mean_squared_error(true, predicted))


def test_early_stopping_mode_follows_the_metric_and_the_metric_must_belong_to_the_task(tiny_config, tmp_path):
    assert tiny_config({"early_stopping.metric": "val_f1"})["early_stopping"]["mode"] == "max"
    assert tiny_config({"early_stopping.metric": "val_mae"})["early_stopping"]["mode"] == "min"
    resolved = tiny_config()  # its mode was filled in: min, for val_loss
    with pytest.raises(QG.ConfigError, match="early_stopping.mode: 'min' but val_f1 improves towards 'max'; set "
                                             "mode to null"):
        QG.load_config(resolved, {"early_stopping.metric": "val_f1"})
    with pytest.raises(QG.ConfigError, match="early_stopping.metric: val_f1 is not reported by the multiclass task; "
                                             "expected one of val_loss, val_accuracy"):
        QG.Trainer(tiny_config({"early_stopping.metric": "val_f1"}))
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- your own dataset, one process
def test_trainer_takes_a_list_of_data_for_a_binary_task(tiny_config):
    trainer = QG.Trainer(tiny_config({"task.type": "binary", "early_stopping.metric": "val_f1",
                                      "training.figures": True}), dataset=small_sets())
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    test = trainer.run_test(test_loader)
    trainer.close()
    assert trainer.task.output_width == 1 and sum(len(s) for s in trainer.split.values()) == 60
    assert {"val_loss", "val_accuracy", "val_precision", "val_recall", "val_f1"} <= set(_rows(trainer.run_dir)[0])
    assert set(test) >= {"test_loss", "test_accuracy", "test_precision", "test_recall", "test_f1", "num_test"}
    (tn, fp), (fn, tp) = test["confusion_matrix"]
    assert test["test_f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn)) and tn + fp + fn + tp == test["num_test"]
    assert (trainer.run_dir / "figures" / "confusion_matrix.png").is_file()
    assert trainer.summary["best_val_f1"] == max(r["val_f1"] for r in trainer.history)


@pytest.mark.parametrize("dataset_class, problem", [
    ("SetsWithoutY", r"item 0: its items need x, edge_index and y, item has no y"),
    ("SetsWithVaryingFeatureWidth", r"every item needs the same number of node features .*item 11: 4"),
    ("SetsWithLabelTwo", r"item 11 does not fit the binary task: a binary task needs y = 0 or 1, got 2"),
])
def test_a_dataset_that_does_not_fit_is_one_config_error_naming_data_type(tiny_config, tmp_path, dataset_class,
                                                                          problem):
    config = tiny_config({"data.type": resolve_pyobject(f"own_data_helpers.{dataset_class}"), "task.type": "binary"})
    with pytest.raises(QG.ConfigError, match=rf"data.type \(own_data_helpers.{dataset_class}\): {problem}"):
        QG.Trainer(config)
    assert not (tmp_path / "runs").exists()


def test_a_label_outside_the_binary_classes_is_named_with_its_value(tiny_config):
    items = [d.clone() for d in small_sets(12)]
    items[0].y = torch.tensor([2])
    with pytest.raises(QG.ConfigError, match=r"dataset \(the object passed to the trainer\): item 0 does "
                                             r"not fit the binary task: a binary task needs y = 0 or 1, got 2"):
        QG.Trainer(tiny_config({"task.type": "binary"}), dataset=items)


def test_data_kwargs_the_class_rejects_are_a_config_error(tiny_config):
    with pytest.raises(QG.ConfigError, match=r"data.kwargs: my_causal_sets.MyCausalSets\(\*\*data.kwargs\) failed: "
                                             r".*unexpected keyword argument 'size'"):
        QG.Trainer(tiny_config({"data.type": MY_SETS, "data.kwargs": {"size": 3}}))


# --------------------------------------------------------------------------- your own model
def test_a_model_with_the_wrong_output_width_is_named_by_its_key(tiny_config, tmp_path):
    config = tiny_config({**BINARY, "model.type": resolve_pyobject("own_data_helpers.ModelWithFiveOutputs")})
    with pytest.raises(QG.ConfigError, match=r"model.type \(own_data_helpers.ModelWithFiveOutputs\): expected "
                                             r"outputs of shape \[1, 1\] .* got shape \[1, 5\]"):
        QG.Trainer(config)
    assert not (tmp_path / "runs").exists()


def test_a_model_that_reads_a_graph_attribute_the_data_lacks_is_named_by_its_key(tiny_config):
    # The generator's data has invariants; a list without them does not.
    items = [type(d)(x=d.x, edge_index=d.edge_index, y=d.y) for d in small_sets(12)]
    with pytest.raises(QG.ConfigError, match=r"model.type \(my_causal_sets.GraphAndInvariantsGNN\): a forward pass "
                                             r"on one causal set failed .*invariants.*the batch holds only"):
        QG.Trainer(tiny_config({"model.type": MY_MODEL, "task.type": "binary"}), dataset=items)


def test_the_docs_show_the_example_model_as_it_is_tested():
    docs = (REPO / "docs" / "your_own_data.md").read_text()
    assert inspect.getsource(MY_MODEL) in docs


# --------------------------------------------------------------------------- regression on the generator
def test_regression_on_the_myrheim_meyer_dimension_beats_the_training_mean(tiny_config):
    result = QG.launch(tiny_config({**REGRESSION, "training.figures": True}), nproc=1)
    test, run_dir = result["test"], Path(result["run_dir"])
    assert {"test_mae", "test_rmse", "test_r2", "train_mean_rmse"} <= set(test)
    assert test["test_rmse"] < 0.5 * test["train_mean_rmse"], test
    assert test["test_r2"] > 0.5 and test["train_mean_r2"] <= 0.05, test
    assert (run_dir / "figures" / "predictions.png").is_file()
    assert not (run_dir / "figures" / "confusion_matrix.png").exists()
    assert {"val_mae", "val_rmse", "val_r2"} <= set(_rows(run_dir)[0])


# --------------------------------------------------------------------------- two processes
def _single_process_evaluation(config, run_dir, name):
    trainer = QG.Trainer(QG.apply_overrides(config, {"training.run_name": name}))
    state = torch.load(Path(run_dir) / "checkpoints" / "last.pt", weights_only=True)
    trainer.core_model.load_state_dict(state["model"])
    _, val_loader, _ = trainer.prepare_dataloaders()
    expected = trainer.evaluate(val_loader)
    trainer.close()
    return expected


@pytest.mark.parametrize("overrides, metrics", [
    ({**BINARY, "model.type": MY_MODEL, "training.num_epochs": 2}, ("loss", "accuracy", "precision", "recall", "f1")),
    ({**REGRESSION, "training.num_epochs": 2}, ("loss", "mae", "rmse", "r2")),
], ids=["binary-data.type-own-model", "regression"])
def test_two_processes_report_the_metrics_of_one_process_evaluating_the_split(tiny_config, overrides, metrics):
    overrides = {**overrides, "validation.batch_size": 3}
    result = QG.launch(tiny_config({**overrides, "training.run_name": "ddp"}), nproc=2)
    expected = _single_process_evaluation(tiny_config(overrides), result["run_dir"], "check")
    last = result["history"][-1]
    for metric in metrics:
        assert last[f"val_{metric}"] == pytest.approx(expected[metric], rel=1e-5, abs=1e-9), metric
    assert set(f"test_{m}" for m in metrics) <= set(result["test"])


def test_trainer_ddp_takes_a_dataset_object_on_every_rank(tiny_config):
    from ddp_helpers import spawn_ranks
    from own_data_helpers import trainer_ddp_on_a_dataset_object
    config = tiny_config({"task.type": "binary", "training.num_epochs": 2})
    reports = {rank: rest for rank, *rest in spawn_ranks(trainer_ddp_on_a_dataset_object, 2, config, timeout_s=120)}
    assert reports[0][0] is not None, reports
    assert reports[0][0] == reports[1][0], "every rank holds rank 0's epoch record"
    assert reports[0][1]["test_f1"] >= 0 and reports[1][1] is None
    assert reports[0][2] == reports[1][2]


def test_launch_with_a_dataset_that_does_not_fit_fails_on_every_rank_and_leaves_nothing(tiny_config, tmp_path):
    config = tiny_config({"data.type": resolve_pyobject("own_data_helpers.SetsWithoutY")})
    with pytest.raises(QG.UserError, match=r"data.type \(own_data_helpers.SetsWithoutY\): item 0: .*no y"):
        QG.launch(config, nproc=2)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_launch_refuses_a_dataset_class_defined_in_a_notebook_or_function(tiny_config):
    class NotebookSets(torch.utils.data.Dataset):
        pass

    with pytest.raises(QG.UserError, match=r"data.type = .*NotebookSets: spawned worker processes cannot import "
                                           r".*Move it into a .py module next to the notebook"):
        QG.launch(tiny_config({"data.type": NotebookSets}), nproc=2)


def test_a_multiclass_loss_for_a_binary_task_is_refused(tiny_config):
    # cross_entropy over one logit is a constant 0: the run would learn nothing, silently.
    config = tiny_config({**BINARY, "criterion": resolve_pyobject("torch.nn.functional.cross_entropy")})
    with pytest.raises(QG.ConfigError, match="criterion: cross_entropy is a multiclass loss, but the task is binary; "
                                             "remove criterion"):
        QG.Trainer(config)


# --------------------------------------------------------------------------- the generator's targets
def test_the_generator_offers_the_myrheim_meyer_dimension_as_a_continuous_target(tmp_path):
    from QuantumGrav.data.causal_sets import INVARIANT_NAMES

    dataset = QG.CausalSetDataset(tmp_path, num_samples=20, n_min=12, n_max=16, target="myrheim_meyer_dimension")
    column = INVARIANT_NAMES.index("myrheim_meyer_dimension")
    assert dataset.task == "regression" and dataset.class_names == []
    for graph in dataset:
        assert graph.y.dtype == torch.float32 and graph.y.item() == graph.invariants[0, column].item()
    assert len({round(graph.y.item(), 6) for graph in dataset}) > len(dataset) // 2  # continuous, not a few labels


@pytest.mark.parametrize("target, task, width, names", [
    ("manifold_like", "binary", 1, ["non_manifold_like", "manifold_like"]),
    ("dimension", "multiclass", 3, ["d=2", "d=3", "d=4"]),
    ("myrheim_meyer_dimension", "regression", 1, []),
])
def test_task_auto_follows_the_generator_target(tiny_config, target, task, width, names):
    trainer = QG.Trainer(tiny_config({"data.target": target}))
    trainer.close()
    assert (trainer.task.type, trainer.task.output_width, trainer.task.class_names) == (task, width, names)


def test_task_type_overrides_what_the_data_suggests(tiny_config):
    # manifold_like as two classes with cross-entropy, as before binary tasks existed.
    trainer = QG.Trainer(tiny_config({"data.target": "manifold_like", "task.type": "multiclass"}))
    trainer.close()
    assert trainer.task.type == "multiclass" and trainer.task.output_width == 2


# --------------------------------------------------------------------------- the default model on any causal set
# own_data_helpers.UserCausalSets: 160 sets of 16..32 elements written with numpy alone (2d and 4d sprinklings,
# layered orders, transitive percolation; 40 each), items x, edge_index, y and no invariants. Four balanced
# classes: chance is 0.25 and the test split holds 24 sets. Measured with the settings below (configs/train.yaml's
# model, 10 epochs, 16 sets per step) over 20 seeds of data, split and weights: test accuracy 0.75 to 1.0, median
# 0.92 on one process; 0.75 to 0.96 over 15 seeds on two (8 sets per process and step). 0.6 is 2.4x chance, and
# 15 of 24 right by guessing has probability 1e-4.
WELL_ABOVE_CHANCE = 0.6
USER_SETS_OVERRIDES = ["training.num_epochs=10", "training.batch_size=16", "training.device=cpu",
                       "training.figures=false", "training.progress_bar=false"]


def _train_yaml_naming(dataset_class: str, folder: Path) -> Path:
    """configs/train.yaml as a user copies it, with data.type and data.kwargs added (the model unchanged)."""
    text = (REPO / "configs" / "train.yaml").read_text()
    assert text.endswith("  seed: 1234\n"), "the data section ends the file"
    path = folder / "my_train.yaml"
    path.write_text(text + f"  type: !pyobject {dataset_class}\n  kwargs: {{num_sets: 160}}\n")
    return path


def test_the_default_config_trains_a_users_causal_sets_from_the_cli(tmp_path):
    """No invariants in the data: the default model's graph features and the baselines derive them from edge_index."""
    config = _train_yaml_naming("own_data_helpers.UserCausalSets", tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    sets = [arg for override in USER_SETS_OVERRIDES for arg in ("--set", override)]
    done = subprocess.run([sys.executable, "-m", "QuantumGrav", "train", "--config", str(config), *sets], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["num_test"] == 24 and summary["test_accuracy"] >= WELL_ABOVE_CHANCE, summary
    assert summary["strong_baseline_accuracy"] >= WELL_ABOVE_CHANCE, "the baselines ran on the derived invariants"
    assert "strong baseline  accuracy" in done.stdout


def test_the_default_config_trains_a_users_causal_sets_on_two_processes(tmp_path):
    config = QG.load_config(_train_yaml_naming("own_data_helpers.UserCausalSets", tmp_path),
                            [*USER_SETS_OVERRIDES, "training.batch_size=8", f"training.path={tmp_path / 'runs'}",
                             "testing.baselines=false"])
    assert config["model"]["graph_features"] and config["model"]["directions"] == "both"
    result = QG.launch(config, nproc=2)
    assert result["test"]["num_test"] == 24 and result["test"]["test_accuracy"] >= WELL_ABOVE_CHANCE, result["test"]


def test_causal_sets_given_as_undirected_graphs_are_one_error_naming_the_item_and_the_fix(tmp_path, capsys,
                                                                                        monkeypatch):
    from QuantumGrav.cli import main

    config = _train_yaml_naming("own_data_helpers.UndirectedUserCausalSets", tmp_path)
    monkeypatch.chdir(tmp_path)  # the config's training.path: runs
    assert main(["train", "--config", str(config), *(f"--set={o}" for o in USER_SETS_OVERRIDES)]) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: data.type (own_data_helpers.UndirectedUserCausalSets): item 0 is not a causal "
                              "set (a partial order): its edge_index has a cycle (")
    assert "an edge both ways, as in an undirected graph); model.graph_features and testing.baselines need" in message
    assert message.endswith("train without them: model.graph_features: false, testing.baselines: false")
    assert len(message.splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_without_graph_features_and_baselines_graphs_that_are_not_orders_train(tiny_config):
    trainer = QG.Trainer(tiny_config({"data.type": resolve_pyobject("own_data_helpers.UndirectedUserCausalSets")}))
    trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    assert "invariants" not in trainer.dataset[0]


def test_a_cycle_in_an_item_not_checked_up_front_stops_the_run_naming_that_item(tiny_config, tmp_path):
    """An item that the check of a few items passes over is still named: the training range (every training item's
    N and invariants, recorded in each checkpoint) reads it before the run directory exists."""
    train = QG.split_indices(12, TINY["data"]["split"], 42)[0]
    bad = next(i for i in train if i not in (0, 6, 11))  # not among the items checked before training
    # preflight off: its largest batch may hold the bad item and would name it before training (as it should)
    with pytest.raises(QG.ConfigError, match=rf"own_data_helpers.UserCausalSetsWithOneCycle\): item {bad} is not a "
                                             rf"causal set \(a partial order\): its edge_index has a cycle \(1 -> 2 -> "
                                             rf"3 -> 1: a directed cycle\); model.graph_features needs"):
        QG.Trainer(tiny_config({"data.type": resolve_pyobject("own_data_helpers.UserCausalSetsWithOneCycle"),
                                "data.kwargs": {"bad": bad}, "model.graph_features": True,
                                "training.preflight": False, "training.path": str(tmp_path / "runs")}))
    assert not (tmp_path / "runs").exists()
