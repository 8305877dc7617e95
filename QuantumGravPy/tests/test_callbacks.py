"""Callbacks: hooks that add to a run, and votes that stop every rank together (QuantumGrav.callbacks)."""

import csv
from pathlib import Path

import pytest

import QuantumGrav as QG
from ddp_helpers import StopOnRank1, ValError


def test_a_callback_adds_a_metric_to_every_epoch_row(tiny_config):
    trainer = QG.Trainer(tiny_config(), callbacks=[ValError()])
    try:
        loaders = trainer.prepare_dataloaders()
        trainer.run_training(*loaders[:2])
    finally:
        trainer.close()
    rows = list(csv.DictReader((trainer.run_dir / "metrics.csv").open()))
    assert [float(r["val_error"]) for r in rows] == pytest.approx([1 - float(r["val_accuracy"]) for r in rows])
    assert [r["val_error"] for r in trainer.history] == pytest.approx([float(r["val_error"]) for r in rows])


def test_callbacks_from_the_config_are_built_with_their_kwargs(tiny_config):
    config = tiny_config({"callbacks": QG.config.load_yaml_text(
        "[{type: !pyobject ddp_helpers.StopOnRank1, kwargs: {at_epoch: 0}}]")})
    assert config["callbacks"] == [{"type": StopOnRank1, "kwargs": {"at_epoch": 0}}]
    trainer = QG.Trainer(config)
    try:
        assert [type(c) for c in trainer.callbacks.all if isinstance(c, StopOnRank1)] == [StopOnRank1]
    finally:
        trainer.close()


@pytest.mark.parametrize("entry", ["{type: !pyobject subprocess.run}", "{kind: !pyobject ddp_helpers.StopOnRank1}"])
def test_a_callbacks_entry_that_is_not_a_callback_class_is_refused(tiny_config, entry):
    with pytest.raises(QG.ConfigError, match=r"callbacks: item 0: expected \{type: !pyobject module.CallbackClass"):
        tiny_config({"callbacks": [QG.config.load_yaml_text(entry)]})


def test_a_vote_on_rank_1_alone_stops_every_rank_at_the_same_epoch(tiny_config):
    config = tiny_config({"training.num_epochs": 4, "early_stopping.enabled": False})
    result = QG.launch(config, nproc=2, callbacks=[StopOnRank1(at_epoch=1)])
    assert [r["epoch"] for r in result["history"]] == [0, 1]
    assert result["summary"]["stop_reason"] == "rank 1 asked to stop at epoch 1"
    assert result["summary"]["stopped_by"] == "StopOnRank1"
    for rank in (0, 1):  # every rank says where it stopped in its own log
        log = (Path(result["run_dir"]) / "logs" / f"rank_{rank}.log").read_text()
        assert "training finished at epoch 1: rank 1 asked to stop at epoch 1" in log
