"""WandbLogger with the real wandb library, offline: what is logged is what is read back,
resume continues the same run id, and every failure of W&B leaves training untouched."""

from pathlib import Path

import pytest
import torch

wandb = pytest.importorskip("wandb")

from QuantumGrav.runs import wandb_logger  # noqa: E402
from QuantumGrav.runs.wandb_files import read_offline_runs  # noqa: E402
from QuantumGrav.runs.wandb_logger import WandbLogger  # noqa: E402

METRICS = [{"epoch": e, "train_loss": 1.0 / (e + 1), "val_accuracy": 0.5 + 0.125 * e, "lr": 1e-3}
           for e in range(4)]
RESOLVED = {"training": {"optimizer_type": torch.optim.AdamW, "lr": 1e-3, "path": Path("runs")},
            "model": {"hidden_channels": [16, 16]}}


@pytest.fixture
def warnings(collect_log):
    """Warnings of the QuantumGrav.wandb logger, whatever setup_logging did before."""
    return collect_log("QuantumGrav.wandb")


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    """Offline, silent, and pointed away from ~/.config and the real server: no test can go online."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: never a real server
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb_home" / name.lower()))


def _png(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    fig.savefig(path)
    plt.close(fig)
    return path


def test_offline_run_round_trip_and_resume(tmp_path, warnings):
    run_dir = tmp_path / "run"
    cfg = {"project": "qg-tests", "tags": ["unit"], "watch": {"enabled": True}}
    experiment = WandbLogger(cfg, run_dir, RESOLVED)
    assert experiment.run_id
    experiment.log_model_info({"total_params": 1234, "trainable_params": 1000, "size_mb": 0.005})
    experiment.watch(torch.nn.Linear(3, 2))
    experiment.watch("not a model")  # wandb raises; only watching is given up
    for epoch, metrics in enumerate(METRICS[:3]):
        experiment.log_epoch(metrics, epoch)
    experiment.log_summary({"best_epoch": 2, "test_accuracy": 0.875})
    experiment.log_images({"training_curves": _png(tmp_path / "curves.png")})
    experiment.finish()
    experiment.finish()  # twice is fine
    assert len(warnings) == 1 and "wandb.watch failed" in warnings[0]

    [run] = read_offline_runs(run_dir)
    assert run["id"] == experiment.run_id and Path(run["dir"]).parent == run_dir / "wandb"
    assert run["history"][:3] == METRICS[:3]  # exactly the dicts given, values equal
    assert len(run["history"]) == 4 and run["history"][3]["training_curves"]["_type"] == "image-file"
    assert run["config"]["training"] == {"optimizer_type": "torch.optim.adamw.AdamW", "lr": 1e-3, "path": "runs"}
    assert run["config"]["model/total_params"] == 1234
    assert run["summary"]["best_epoch"] == 2 and run["summary"]["test_accuracy"] == 0.875
    assert run["summary"]["model/trainable_params"] == 1000
    assert run["summary"]["train_loss"] == METRICS[2]["train_loss"]  # last logged value

    resumed = WandbLogger(cfg, run_dir, RESOLVED, resume_id=experiment.run_id)
    assert resumed.run_id == experiment.run_id
    resumed.log_epoch(METRICS[3], 3)
    resumed.finish()
    first, second = read_offline_runs(run_dir)
    assert first["id"] == second["id"] == experiment.run_id
    assert second["history"] == [METRICS[3]]


def test_failing_init_warns_once_and_turns_every_method_into_a_no_op(tmp_path, monkeypatch, warnings):
    def broken_init(**kwargs):
        raise RuntimeError("wandb service could not start")

    monkeypatch.setattr(wandb, "init", broken_init)
    experiment = WandbLogger({"watch": {"enabled": True}}, tmp_path, RESOLVED)
    experiment.log_model_info({"total_params": 1})
    experiment.watch(torch.nn.Linear(2, 2))
    experiment.log_epoch(METRICS[0], 0)
    experiment.log_summary({"a": 1})
    experiment.log_images({"x": tmp_path / "missing.png"})
    experiment.finish()
    assert experiment.run_id is None
    assert len(warnings) == 1
    assert "wandb.init failed" in warnings[0] and "could not start" in warnings[0] and "metrics.csv" in warnings[0]


def test_log_failing_mid_run_disables_the_logger_with_one_warning(tmp_path, monkeypatch, warnings):
    experiment = WandbLogger({}, tmp_path, RESOLVED)
    experiment.log_epoch(METRICS[0], 0)

    def dead_service(*args, **kwargs):
        raise ConnectionResetError("service connection closed")

    monkeypatch.setattr(type(experiment._run), "log", dead_service)
    experiment.log_epoch(METRICS[1], 1)
    experiment.log_epoch(METRICS[2], 2)
    experiment.log_summary({"best_epoch": 0})
    experiment.finish()
    assert len(warnings) == 1 and "logging epoch 1 failed" in warnings[0] and "metrics.csv" in warnings[0]
    monkeypatch.undo()
    [run] = read_offline_runs(tmp_path)
    assert run["id"] == experiment.run_id and run["history"] == [METRICS[0]]


def _forbid_init(monkeypatch):
    def init(**kwargs):
        raise AssertionError("wandb.init must not be called here")

    monkeypatch.setattr(wandb, "init", init)


def test_nonzero_rank_creates_no_run(tmp_path, monkeypatch, warnings):
    _forbid_init(monkeypatch)
    monkeypatch.setattr(wandb_logger, "is_main_process", lambda: False)
    experiment = WandbLogger({}, tmp_path, RESOLVED)
    experiment.log_epoch(METRICS[0], 0)
    experiment.finish()
    assert experiment.run_id is None and warnings == [] and not (tmp_path / "wandb").exists()


def test_disabled_mode_creates_no_run_and_says_nothing(tmp_path, monkeypatch, warnings):
    _forbid_init(monkeypatch)
    monkeypatch.delenv("WANDB_MODE")
    WandbLogger({"mode": "disabled"}, tmp_path, RESOLVED).log_epoch(METRICS[0], 0)
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the environment overrides the config
    WandbLogger({"mode": "offline"}, tmp_path, RESOLVED).log_epoch(METRICS[0], 0)
    assert warnings == [] and not (tmp_path / "wandb").exists()


def test_missing_wandb_warns_once(tmp_path, monkeypatch, warnings):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    experiment = WandbLogger({}, tmp_path, RESOLVED)
    experiment.log_epoch(METRICS[0], 0)
    assert experiment.run_id is None
    assert len(warnings) == 1 and "not installed" in warnings[0]
