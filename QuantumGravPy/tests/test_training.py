"""Single-process Trainer: learning, run directory, checkpoints, resume, early stopping, model."""

import csv
import json
import platform
from pathlib import Path

import numpy as np
import pytest
import torch
import torch_geometric
from torch_geometric.data import Batch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject
from QuantumGrav.data.sources import make_train_sampler
from conftest import ALL_RESULTS


def _train(config):
    trainer = QG.Trainer(config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    histories = trainer.run_training(train_loader, val_loader)
    test = trainer.run_test(test_loader)
    trainer.close()
    return trainer, histories, test


def _csv_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("conv", ["GraphConv", "GCNConv", "GINConv", "SAGEConv"])
def test_model_builds_from_config_for_each_layer_type(tiny_config, conv):
    config = tiny_config({"model.conv": QG.config.yaml_io.resolve_pyobject(f"torch_geometric.nn.{conv}")})
    dataset = QG.CausalSetDataset.from_config(config["data"])
    model = QG.build_model(config["model"], dataset.num_node_features, dataset.num_classes)
    logits = model(Batch.from_data_list([dataset[0], dataset[1], dataset[2]]))
    assert logits.shape == (3, dataset.num_classes)
    counts = QG.count_parameters(model)
    assert counts["total_params"] == sum(p.numel() for p in model.parameters()) > 0
    assert counts["trainable_params"] == counts["total_params"]


def test_short_training_run_learns_and_writes_the_run_directory(tiny_config):
    config = tiny_config({"training.num_epochs": 12, "data.num_samples": 240, **ALL_RESULTS})
    trainer, (train_history, val_history), test = _train(config)
    chance = 1.0 / trainer.dataset.num_classes
    assert train_history[-1]["loss"] < train_history[0]["loss"]
    assert max(r["accuracy"] for r in val_history) > chance + 0.2
    assert test["test_accuracy"] > chance + 0.2
    run_dir = trainer.run_dir
    for name in ("config.yaml", "metrics.csv", "summary.json", "checkpoints/best.pt", "checkpoints/last.pt",
                 "figures/training_curves.png", "figures/confusion_matrix.png", "logs/rank_0.log"):
        assert (run_dir / name).is_file(), name
    rows = _csv_rows(run_dir)
    assert len(rows) == 12
    assert {"epoch", "train_loss", "val_loss", "val_accuracy", "lr", "epoch_time_s", "graphs_per_s"} <= set(rows[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "completed 12 epochs"
    assert 0.0 <= summary["baseline_accuracy"] <= 1.0 and summary["test_accuracy"] == test["test_accuracy"]
    # What a reader needs to reproduce the result: processes, wall time, versions.
    assert summary["world_size"] == 1 and summary["wall_time_s"] > 0
    assert summary["versions"] == {"python": platform.python_version(), "torch": torch.__version__,
                                   "torch_geometric": torch_geometric.__version__, "QuantumGrav": QG.__version__}
    assert QG.load_config(run_dir / "config.yaml")["training"]["num_epochs"] == 12
    # One flip fraction for every destroyed set: no curve against it.
    assert "destroyed_by_flip_fraction" not in summary
    assert not (run_dir / "figures" / "destroyed_by_flip_fraction.png").exists()


def test_without_figures_and_baselines_a_run_draws_nothing_and_reports_the_model_alone(tiny_config, collect_log):
    config = tiny_config({"training.figures": False, "testing.baselines": False, "training.num_epochs": 1,
                          "data.destroy_fraction": [0.001, 0.1]})
    messages = collect_log("QuantumGrav.training", "INFO")
    trainer, _, test = _train(config)
    assert not (trainer.run_dir / "figures").exists()
    summary = json.loads((trainer.run_dir / "summary.json").read_text())
    assert "baselines" not in summary and not any("baseline" in key for key in summary)
    assert list(summary["destroyed_by_flip_fraction"]["recognised"]) == ["gnn"]  # the numbers, without the figure
    (test_line,) = [m for m in messages if m.startswith("test accuracy")]
    assert "baseline" not in test_line
    files = QG.runs.records.summarise_run({"summary": trainer.summary, "test": test}).splitlines()[-1]
    assert files.split(None, 1)[1] == "config.yaml, metrics.csv, summary.json, checkpoints/, logs/"


def test_a_flip_fraction_range_adds_the_destroyed_sets_per_flip_fraction_to_figures_and_summary(tiny_config):
    """A binary manifold_like target (the multiclass one: test_ddp's world-size-2 test)."""
    trainer, _, test = _train(tiny_config({**ALL_RESULTS, "training.num_epochs": 1,
                                           "data.destroy_fraction": [0.001, 0.1], "data.target": "manifold_like",
                                           "data.classes": ["minkowski_2d", "minkowski_3d", "destroyed"]}))
    assert (trainer.run_dir / "figures" / "destroyed_by_flip_fraction.png").is_file()
    curves = json.loads((trainer.run_dir / "summary.json").read_text())["destroyed_by_flip_fraction"]
    destroyed = [i for i in trainer.split["test"] if float(trainer.dataset[i].flip_fraction) > 0]
    assert len(destroyed) >= 2 and sum(curves["destroyed_sets"]) == len(destroyed)
    edges = curves["bin_edges"]
    assert len(edges) == 6 and edges[0] == pytest.approx(0.001) and edges[-1] == pytest.approx(0.1)
    # Recognised = predicted non-manifold-like: with these classes the non-manifold-like sets are the destroyed
    # ones, so the count is that diagonal entry of the confusion matrix, and the baselines' recall of that class.
    label = test["class_names"].index("non_manifold_like")
    assert sum(curves["recognised"]["gnn"]) == test["confusion_matrix"][label][label]
    for name in ("simple", "strong"):
        recall = test["baselines"][name]["per_class_recall"][label]
        assert sum(curves["recognised"][f"{name}_baseline"]) == round(recall * len(destroyed))
    for name, counts in curves["recognised"].items():
        assert curves["share"][name] == [c / n if n else None for c, n in zip(counts, curves["destroyed_sets"])]
    summary = QG.runs.records.summarise_run({"summary": trainer.summary, "test": test})
    assert "destroyed test sets recognised per flip-fraction bin (0.001..0.1, 5 log-spaced bins" in summary


def test_destroyed_sets_are_binned_by_log_spaced_flip_fraction_edges_included():
    from QuantumGrav.analyses.destroyed_sets import destroyed_curves

    fractions = np.array([0.0, 0.001, 0.0011, 0.01, 0.1, np.nan])
    correct = np.array([True, True, False, True, True, True])
    curves = destroyed_curves({"gnn": (fractions, correct)}, span=[0.001, 0.1])
    assert curves["bin_edges"] == pytest.approx(np.logspace(-3, -1, 6).tolist())
    assert curves["destroyed_sets"] == [2, 0, 1, 0, 1] and curves["recognised"]["gnn"] == [1, 0, 1, 0, 1]
    assert curves["share"]["gnn"] == [0.5, None, 1.0, None, 1.0]
    assert destroyed_curves({"gnn": (np.array([0.0, 0.01, 0.01]), np.ones(3, dtype=bool))}) is None


def test_checkpoints_load_with_weights_only_into_a_fresh_model(tiny_config):
    trainer, _, _ = _train(tiny_config({"training.num_epochs": 2}))
    state = torch.load(trainer.run_dir / "checkpoints/last.pt", weights_only=True)
    assert state["epoch"] == 1 and {"model", "optimizer", "scheduler", "callbacks", "config_yaml"} <= set(state)
    assert state["callbacks"]["early_stopping"]["best_epoch"] in (0, 1)  # every callback's state, by its key
    config = QG.load_config(QG.config.yaml_io.load_yaml_text(state["config_yaml"]))
    model = QG.build_model(config["model"], trainer.dataset.num_node_features, trainer.dataset.num_classes)
    model.load_state_dict(state["model"])
    batch = Batch.from_data_list([trainer.dataset[i] for i in range(4)])
    model.eval()
    trainer.core_model.load_state_dict(state["model"])
    trainer.core_model.eval()
    assert torch.allclose(model(batch), trainer.core_model(batch))


def test_resume_continues_the_same_run_exactly(tiny_config):
    straight, _, _ = _train(tiny_config({"training.num_epochs": 4, "training.run_name": "straight",
                                         "training.scheduler_type": QG.config.yaml_io.resolve_pyobject(
                                             "torch.optim.lr_scheduler.StepLR"),
                                         "training.scheduler_kwargs": {"step_size": 1, "gamma": 0.5}}))
    first, _, _ = _train(tiny_config({"training.num_epochs": 2, "training.run_name": "split",
                                      "training.scheduler_type": QG.config.yaml_io.resolve_pyobject(
                                          "torch.optim.lr_scheduler.StepLR"),
                                      "training.scheduler_kwargs": {"step_size": 1, "gamma": 0.5}}))
    resumed, _, _ = _train(QG.apply_overrides(first.config, {"training.num_epochs": 4,
                                                            "training.resume": str(first.run_dir)}))
    assert resumed.run_dir == first.run_dir
    rows_straight, rows_resumed = _csv_rows(straight.run_dir), _csv_rows(first.run_dir)
    assert [r["epoch"] for r in rows_resumed] == ["0", "1", "2", "3"]
    for a, b in zip(rows_straight, rows_resumed):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-6, abs=1e-9), (key, a["epoch"])


def test_early_stopping_stops_and_says_why(tiny_config):
    config = tiny_config({"training.num_epochs": 10, "early_stopping.patience": 2, "early_stopping.min_delta": 100.0})
    trainer, (train_history, _), _ = _train(config)
    assert len(train_history) == 3  # epoch 0 sets the best; 1 and 2 fail to beat it by 100
    assert "early stopping: val_loss did not improve" in trainer.summary["stop_reason"]
    assert trainer.summary["best_epoch"] == 0


def test_run_files_are_readable_by_others_as_the_umask_allows(tiny_config):
    trainer, _, _ = _train(tiny_config({"training.num_epochs": 1}))
    for name in ("config.yaml", "metrics.csv", "summary.json", "checkpoints/last.pt"):
        assert (trainer.run_dir / name).stat().st_mode & 0o044 == 0o044 & ~_umask(), name


def _umask():
    import os

    current = os.umask(0o022)
    os.umask(current)
    return current


def test_fp16_on_cpu_is_refused_with_advice(tiny_config):
    with pytest.raises(QG.ConfigError, match="training.amp: fp16 needs a CUDA device"):
        QG.Trainer(tiny_config({"training.amp": "fp16"}))


def test_train_sampler_shards_are_disjoint_and_reshuffled_each_epoch():
    data = list(range(24))
    samplers = [make_train_sampler(data, rank, 3, shuffle=True, seed=1) for rank in range(3)]
    epoch0 = [list(s) for s in samplers]
    assert sorted(sum(epoch0, [])) == data
    for s in samplers:
        s.set_epoch(1)
    epoch1 = [list(s) for s in samplers]
    assert sorted(sum(epoch1, [])) == data and epoch1 != epoch0


def test_resume_refuses_a_config_that_changes_the_data_the_model_or_the_task(tiny_config):
    first, _, _ = _train(tiny_config({"training.num_epochs": 1}))
    for change in ({"data.num_samples": 120}, {"model.hidden_channels": [32]}, {"task.threshold": 0.7},
                   {"task.type": "binary"}):
        with pytest.raises(QG.ConfigError, match=f"training.resume: this config changes {next(iter(change))}"):
            QG.Trainer(QG.apply_overrides(first.config, {**change, "training.resume": str(first.run_dir)}))


def test_resume_applies_new_early_stopping_settings(tiny_config):
    first, _, _ = _train(tiny_config({"training.num_epochs": 2}))
    resumed, (history, _), _ = _train(QG.apply_overrides(first.config, {
        "training.num_epochs": 10, "training.resume": str(first.run_dir),
        "early_stopping.patience": 1, "early_stopping.min_delta": 100.0}))
    assert len(history) == 3, "one more epoch, then the new patience of 1 ends the run"
    assert resumed.summary["stop_reason"].startswith("early stopping")


def test_the_run_config_repeats_the_run(tiny_config):
    trainer, _, _ = _train(tiny_config({"training.num_epochs": 1, "training.run_name": "named"}))
    stored = QG.load_config(trainer.run_dir / "config.yaml")
    assert stored["training"]["run_name"] is None and stored["training"]["resume"] is None
    assert {k: v for k, v in stored.items()} == {**trainer.config, "training": stored["training"]}


def test_every_epoch_reshuffles_the_training_batches(tiny_config, monkeypatch):
    trainer = QG.Trainer(tiny_config({"training.num_epochs": 2}))
    seen, forward_backward = [], trainer._forward_backward
    monkeypatch.setattr(trainer, "_forward_backward",
                        lambda batch, *a, **k: seen.append((trainer.epoch, batch.y.tolist())) or forward_backward(
                            batch, *a, **k))
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    epoch0, epoch1 = ([y for e, y in seen if e == epoch] for epoch in (0, 1))
    assert sorted(sum(epoch0, [])) == sorted(sum(epoch1, [])) and epoch0 != epoch1


def test_a_finished_run_closes_its_log_file(tiny_config):
    # In a notebook the kernel lives on: the next run's lines must not land in this run's log.
    result = QG.launch(tiny_config({"training.num_epochs": 1}), nproc=1)
    QG.get_logger("notebook").warning("a line logged after the run")
    log = Path(result["run_dir"]) / "logs" / "rank_0.log"
    assert "training finished" in log.read_text() and "after the run" not in log.read_text()


def test_a_layer_that_needs_edge_features_is_a_config_error_before_any_run_exists(tiny_config, tmp_path):
    config = tiny_config({"model.conv": resolve_pyobject("torch_geometric.nn.GINEConv")})
    with pytest.raises(QG.ConfigError, match=r"model: a forward pass on one causal set failed .*no edge features"):
        QG.Trainer(config)
    assert not (tmp_path / "runs").exists()


def test_extending_a_finished_cosine_run_continues_on_the_cosine_of_the_new_length(tiny_config, collect_log):
    """A 3-epoch run resumed with num_epochs=5 trains epochs 3 and 4 at the LRs a 5-epoch run has there
    (a cosine past its end would restart from zero), and the start block says the LR of the first step."""
    cosine = resolve_pyobject("torch.optim.lr_scheduler.CosineAnnealingLR")
    schedule = {"training.scheduler_type": cosine, "training.warmup_epochs": 1}  # warmup, then the cosine
    straight, _, _ = _train(tiny_config({**schedule, "training.num_epochs": 5, "training.run_name": "straight"}))
    first, _, _ = _train(tiny_config({**schedule, "training.num_epochs": 3, "training.run_name": "extended"}))
    messages = collect_log("QuantumGrav", "INFO")
    resumed, _, _ = _train(QG.apply_overrides(first.config, {"training.num_epochs": 5,
                                                             "training.resume": str(first.run_dir)}))

    lrs = [float(row["lr"]) for row in _csv_rows(resumed.run_dir)]
    expected = [float(row["lr"]) for row in _csv_rows(straight.run_dir)]
    assert lrs[3:] == pytest.approx(expected[3:], rel=1e-9) and lrs[3] > lrs[4] > 0
    start_block = next(m for m in messages if m.startswith("training set-up"))
    assert f"learning rate     {lrs[3]:.3g} at the first step" in start_block
    assert any("planned for 3 epochs, now 5" in m for m in messages), messages


def test_each_step_draws_dropout_from_its_own_seed_without_the_cost_of_torch_manual_seed(tiny_config, monkeypatch):
    """A resumed run replays dropout because every step seeds the generator from (seed, epoch, step, rank).
    torch.manual_seed did it at about 1 ms per step (it formats the Python stack for each accelerator it
    cannot seed yet): the step seeds the generator it draws from instead, to the same state."""
    trainer = QG.Trainer(tiny_config({"training.num_epochs": 2, "model.dropout": 0.3}))
    seeded, states, forward_backward = [], [], trainer._forward_backward
    monkeypatch.setattr(torch, "manual_seed", lambda seed: seeded.append(seed) or torch.default_generator)
    monkeypatch.setattr(trainer, "_forward_backward",
                        lambda batch, *a, **k: states.append(torch.default_generator.get_state()) or forward_backward(
                            batch, *a, **k))
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    steps = len(train_loader)
    assert len(states) == 2 * steps and seeded == []
    for i, state in enumerate(states):
        epoch, step = divmod(i, steps)
        expected = torch.Generator().manual_seed((7 * 1_000_003 + epoch * 10_007 + step) * 1_009 + 0).get_state()
        assert torch.equal(state, expected), (epoch, step)


def test_the_class_balanced_sampler_draws_each_class_equally_and_deals_disjoint_shares():
    from QuantumGrav.data.sources import DistributedClassBalancedSampler

    labels = [0] * 90 + [1] * 10
    samplers = [DistributedClassBalancedSampler(labels, rank, 2, seed=3) for rank in range(2)]
    drawn = [list(s) for s in samplers]
    assert [len(d) for d in drawn] == [50, 50] and all(len(s) == 50 for s in samplers)
    repeated = [list(DistributedClassBalancedSampler(labels, rank, 2, seed=3)) for rank in range(2)]
    assert repeated == drawn, "every rank draws the same sample, so their shares are a split of one draw"
    minority = np.mean([labels[i] for shard in drawn for i in shard])
    many = [labels[i] for epoch in range(20) for i in (samplers[0].set_epoch(epoch) or samplers[0])]
    assert 0.3 < minority < 0.7 and abs(np.mean(many) - 0.5) < 0.06  # 1 in 10 sets, drawn half the time
    samplers[0].set_epoch(21)
    assert list(samplers[0]) != drawn[0]


def test_a_class_balanced_run_trains_and_a_task_without_classes_is_refused(tiny_config):
    trainer = QG.Trainer(tiny_config({"training.sampler": "class_balanced", "training.num_epochs": 1,
                                      "testing.baselines": False}))
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    assert type(train_loader.sampler).__name__ == "DistributedClassBalancedSampler"
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    with pytest.raises(QG.ConfigError, match="training.sampler: class_balanced draws sets by their class, but the "
                                             "regression task"):
        QG.Trainer(tiny_config({"training.sampler": "class_balanced", "data.target": "myrheim_meyer_dimension"}))
