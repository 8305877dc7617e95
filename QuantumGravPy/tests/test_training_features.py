"""Loop features shared by Trainer and TrainerDDP: AMP, accumulation, LR rules, clipping, advice."""

import csv
import math
from pathlib import Path

import pytest
import torch
import yaml

import QuantumGrav as QG
from QuantumGrav.training.advice import config_advice
from QuantumGrav.config.yaml_io import resolve_pyobject
from QuantumGrav.training.schedules import derive_hyperparameters

COSINE = resolve_pyobject("torch.optim.lr_scheduler.CosineAnnealingLR")


def _run(config):
    trainer = QG.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    return trainer


def _lrs(run_dir):
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return [float(r["lr"]) for r in csv.DictReader(f)]


@pytest.mark.parametrize("rule, factor", [("none", 1.0), ("linear", 8.0), ("sqrt", math.sqrt(8.0))])
def test_lr_and_warmup_scale_with_the_effective_batch(tiny_config, rule, factor):
    sections = tiny_config({"training.lr_scaling": rule, "training.batch_size": 8, "training.accumulation_steps": 2,
                            "training.warmup_epochs": 2, "training.optimizer_kwargs": {"lr": 1.0e-3}}).sections
    derived = derive_hyperparameters(sections, world_size=4)
    assert derived["effective_batch_size"] == 64
    assert derived["lr"] == pytest.approx(1e-3 * factor)
    assert derived["warmup_epochs"] == round(2 * factor)


def test_ddp_run_with_bf16_accumulation_scaling_and_clipping(tiny_config):
    config = tiny_config({"training.amp": "bf16", "training.accumulation_steps": 2, "training.lr_scaling": "linear",
                          "training.grad_clip_norm": 1.0, "training.num_epochs": 2,
                          "training.optimizer_kwargs": {"lr": 1.0e-3}})
    result = QG.launch(config, nproc=2)
    run_dir = Path(result["run_dir"])
    assert all(math.isfinite(r["train_loss"]) for r in result["history"])
    stored = yaml.load((run_dir / "config.yaml").read_text(), QG.get_loader())
    assert stored["derived"]["effective_batch_size"] == 8 * 2 * 2
    assert stored["derived"]["lr"] == pytest.approx(4e-3)
    assert _lrs(run_dir)[0] == pytest.approx(4e-3)
    log = (run_dir / "logs" / "rank_0.log").read_text()
    assert "8 per process x 2 accumulation x 2 processes = 32 effective" in log
    assert "learning rate     0.004 at the first step (peak 0.004, base 0.001, scaling linear" in log


def test_warmup_then_cosine_and_exact_resume_mid_warmup(tiny_config):
    schedule = {"training.warmup_epochs": 2, "training.scheduler_type": COSINE,
                "training.scheduler_kwargs": {"T_max": 4}, "training.optimizer_kwargs": {"lr": 1.0e-2}}
    straight = _run(tiny_config({**schedule, "training.num_epochs": 6, "training.run_name": "straight"}))
    lrs = _lrs(straight.run_dir)
    assert lrs[0] == pytest.approx(1e-2 / 3) and lrs[1] == pytest.approx(2e-2 / 3)  # linear ramp
    assert lrs[2] == pytest.approx(1e-2)  # warmup done: cosine starts at the peak
    assert lrs[2] > lrs[3] > lrs[4] > lrs[5]  # then decays
    first = _run(tiny_config({**schedule, "training.num_epochs": 1, "training.run_name": "split"}))
    resumed = _run(QG.apply_overrides(first.config, {"training.num_epochs": 6, "training.resume": str(first.run_dir)}))
    assert _lrs(resumed.run_dir) == pytest.approx(lrs, rel=1e-9)


def test_bf16_autocast_trains_on_cpu(tiny_config):
    trainer = _run(tiny_config({"training.amp": "bf16", "training.num_epochs": 2}))
    assert all(math.isfinite(r["train_loss"]) for r in trainer.history)


def test_gradient_clipping_bounds_the_update(tiny_config):
    sgd = {"training.optimizer_type": resolve_pyobject("torch.optim.SGD"), "training.optimizer_kwargs": {"lr": 1.0},
           "training.num_epochs": 1, "model.norm": "none"}
    trainer = QG.Trainer(tiny_config({**sgd, "training.grad_clip_norm": 1.0e-3}))
    before = torch.cat([p.detach().flatten().clone() for p in trainer.core_model.parameters()])
    batch = next(iter(trainer.prepare_dataloaders()[0]))
    trainer._forward_backward(batch, group_size=1, sync=True)
    trainer.optimization.step()
    after = torch.cat([p.detach().flatten() for p in trainer.core_model.parameters()])
    assert 0 < torch.linalg.vector_norm(after - before) <= 1e-3 * (1 + 1e-4)


def test_config_advice_names_the_key_to_change(tiny_config):
    config = tiny_config({"training.batch_size": 2, "training.accumulation_steps": 2, "training.num_workers": 4,
                          "training.pin_memory": True})
    advice = "\n".join(config_advice(config.sections, world_size=2, device_type="cpu", cpu_count=2))
    assert "raise training.batch_size" in advice
    assert "use training.num_workers <= 0" in advice
    assert "set training.pin_memory: false" in advice
    assert "set training.lr_scaling: linear" in advice
    assert config_advice(tiny_config().sections, world_size=1, device_type="cpu", cpu_count=2) == []


def test_memory_is_logged_every_n_steps_and_in_the_csv_and_the_limit_warns_once(tiny_config):
    # preflight off: it would refuse to start under a 1 MB limit (test_batching.py)
    trainer = _run(tiny_config({"training.log_every_n_steps": 2, "training.memory_limit_mb": 1.0,
                                "training.preflight": False, "training.num_epochs": 2}))
    log = (trainer.run_dir / "logs" / "rank_0.log").read_text()
    assert "epoch 0 step 1: loss" in log and "RSS" in log
    assert log.count("above the limit of 1 MB (training.memory_limit_mb)") == 1
    with open(trainer.run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["rss_mb"]) > 1.0 for r in rows) and "cuda_peak_mb" in rows[0]


@pytest.mark.parametrize("setting, ci, rank_is_main, shown", [
    (True, "true", True, True),      # asked for: shown even under CI
    ("auto", "true", True, False),   # auto: never under CI (nor when stderr is not a terminal)
    (True, "", False, False),        # never on ranks other than 0
    (False, "", True, False),
])
def test_progress_bar_only_on_rank_0_and_not_under_ci_unless_asked(tiny_config, monkeypatch, setting, ci,
                                                                   rank_is_main, shown):
    from tqdm.auto import tqdm

    trainer = QG.Trainer(tiny_config({"training.progress_bar": setting}))
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(type(trainer.runtime), "is_main", property(lambda self: rank_is_main))
    loader = trainer.prepare_dataloaders()[0]
    with trainer.progress.bar(loader, epoch=0, total=len(loader)) as batches:
        assert isinstance(batches, tqdm) is shown


def test_reduce_lr_on_plateau_gets_the_validation_metric(tiny_config):
    trainer = _run(tiny_config({"training.num_epochs": 3, "training.optimizer_kwargs": {"lr": 1.0e-2},
                                "training.scheduler_type": resolve_pyobject(
                                    "torch.optim.lr_scheduler.ReduceLROnPlateau"),
                                "training.scheduler_kwargs": {"patience": 0, "factor": 0.5, "threshold": 10.0}}))
    assert _lrs(trainer.run_dir) == pytest.approx([1e-2, 5e-3, 2.5e-3])  # no epoch improves by 1000%


def test_reduce_lr_on_plateau_follows_a_metric_to_maximise(tiny_config):
    plateau = {"training.scheduler_type": resolve_pyobject("torch.optim.lr_scheduler.ReduceLROnPlateau"),
               "training.scheduler_kwargs": {"patience": 0, "factor": 0.5}, "training.optimizer_kwargs": {"lr": 1e-2}}
    trainer = QG.Trainer(tiny_config({**plateau, "early_stopping.metric": "val_accuracy"}))
    assert trainer.scheduler.mode == "max"
    for accuracy in (0.5, 0.6, 0.7):  # rising accuracy: an improvement every epoch, the LR stays
        trainer.scheduler.step(accuracy)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)
    trainer.scheduler.step(0.6)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(5e-3)
    assert QG.Trainer(tiny_config(plateau)).scheduler.mode == "min"  # val_loss
    with pytest.raises(QG.ConfigError, match="training.scheduler_kwargs.mode: .* mode is 'max', got 'min'"):
        QG.Trainer(tiny_config({**plateau, "early_stopping.metric": "val_accuracy",
                                "training.scheduler_kwargs": {"mode": "min"}}))


def test_cosine_without_t_max_decays_over_the_epochs_after_warmup(tiny_config):
    trainer = QG.Trainer(tiny_config({"training.num_epochs": 7, "training.warmup_epochs": 2,
                                      "training.scheduler_type": COSINE, "training.scheduler_kwargs": {}}))
    assert trainer.scheduler._schedulers[1].T_max == 5


@pytest.mark.parametrize("overrides, message", [
    ({"training.optimizer_kwargs": {"lr": 1.0e-3, "momentum": 0.9}},
     "training.optimizer_kwargs: AdamW rejects the configured arguments"),
    ({"training.scheduler_type": COSINE, "training.scheduler_kwargs": {"bogus": 1}},
     "training.scheduler_kwargs: CosineAnnealingLR rejects"),
    ({"model.conv_kwargs": {"bogus": 1}}, r"model.conv_kwargs: GraphConv rejects \{.bogus.: 1\}"),
    ({"criterion": lambda logits: logits.sum()}, r"criterion: calling it as criterion\(outputs, target\) failed"),
    ({"criterion": resolve_pyobject("ddp_helpers.loss_per_graph")}, "criterion: expected a scalar loss tensor"),
    ({"training.scheduler_type": resolve_pyobject("torch.optim.lr_scheduler.ReduceLROnPlateau"),
      "training.warmup_epochs": 1}, "training.scheduler_type: ReduceLROnPlateau steps once per epoch"),
])
def test_constructor_arguments_they_reject_are_config_errors_and_nothing_is_written(tiny_config, tmp_path,
                                                                                  overrides, message):
    with pytest.raises(QG.ConfigError, match=message):
        QG.Trainer(tiny_config(overrides))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
