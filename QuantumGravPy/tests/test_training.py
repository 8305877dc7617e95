"""Single-process Trainer: learning, run directory, checkpoints, resume, early stopping, model."""

import csv
import json
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch

import QuantumGrav as QG
from QuantumGrav.config import resolve_pyobject
from QuantumGrav.data_sources import make_train_sampler


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
    config = tiny_config({"model.conv": QG.config.resolve_pyobject(f"torch_geometric.nn.{conv}")})
    dataset = QG.CausalSetDataset.from_config(config["data"])
    model = QG.build_model(config["model"], dataset.num_node_features, dataset.num_classes)
    logits = model(Batch.from_data_list([dataset[0], dataset[1], dataset[2]]))
    assert logits.shape == (3, dataset.num_classes)
    counts = QG.count_parameters(model)
    assert counts["total_params"] == sum(p.numel() for p in model.parameters()) > 0
    assert counts["trainable_params"] == counts["total_params"]


def test_short_training_run_learns_and_writes_the_run_directory(tiny_config):
    config = tiny_config({"training.num_epochs": 12, "data.num_samples": 240})
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
    assert QG.load_config(run_dir / "config.yaml")["training"]["num_epochs"] == 12


def test_checkpoints_load_with_weights_only_into_a_fresh_model(tiny_config):
    trainer, _, _ = _train(tiny_config({"training.num_epochs": 2}))
    state = torch.load(trainer.run_dir / "checkpoints/last.pt", weights_only=True)
    assert state["epoch"] == 1 and {"model", "optimizer", "scheduler", "early_stopping", "config_yaml"} <= set(state)
    config = QG.load_config(QG.config.load_yaml_text(state["config_yaml"]))
    model = QG.build_model(config["model"], trainer.dataset.num_node_features, trainer.dataset.num_classes)
    model.load_state_dict(state["model"])
    batch = Batch.from_data_list([trainer.dataset[i] for i in range(4)])
    model.eval()
    trainer.core_model.load_state_dict(state["model"])
    trainer.core_model.eval()
    assert torch.allclose(model(batch), trainer.core_model(batch))


def test_resume_continues_the_same_run_exactly(tiny_config):
    straight, _, _ = _train(tiny_config({"training.num_epochs": 4, "training.run_name": "straight",
                                         "training.scheduler_type": QG.config.resolve_pyobject(
                                             "torch.optim.lr_scheduler.StepLR"),
                                         "training.scheduler_kwargs": {"step_size": 1, "gamma": 0.5}}))
    first, _, _ = _train(tiny_config({"training.num_epochs": 2, "training.run_name": "split",
                                      "training.scheduler_type": QG.config.resolve_pyobject(
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


def test_resume_refuses_a_config_that_changes_the_data_or_the_model(tiny_config):
    first, _, _ = _train(tiny_config({"training.num_epochs": 1}))
    for change in ({"data.num_samples": 120}, {"model.hidden_channels": [32]}):
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


def test_resuming_for_more_epochs_says_the_lr_schedule_keeps_its_length(tiny_config, collect_log):
    cosine = resolve_pyobject("torch.optim.lr_scheduler.CosineAnnealingLR")
    first, _, _ = _train(tiny_config({"training.num_epochs": 2, "training.scheduler_type": cosine}))
    warnings = collect_log("QuantumGrav.training")
    resumed = QG.apply_overrides(first.config, {"training.num_epochs": 4, "training.resume": str(first.run_dir)})
    QG.Trainer(resumed).close()
    assert any("planned for 2 epochs" in w and "does not stretch to 4" in w for w in warnings), warnings
