"""Callbacks: hooks that add to a run, and votes that stop every rank together (QuantumGrav.callbacks)."""

import csv
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.callbacks.base import CallbackList
from ddp_helpers import InterruptAtEpoch, InterruptAtStep, StopOnRank1, ValError, count_blocking_collectives, spawn_ranks


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
    config = tiny_config({"callbacks": QG.config.yaml_io.load_yaml_text(
        "[{type: !pyobject ddp_helpers.StopOnRank1, kwargs: {at_epoch: 0}}]")})
    assert config["callbacks"] == [{"type": StopOnRank1, "kwargs": {"at_epoch": 0}}]
    trainer = QG.Trainer(config)
    try:
        assert [type(c) for c in trainer.callbacks.all if isinstance(c, StopOnRank1)] == [StopOnRank1]
    finally:
        trainer.close()


def test_callback_kwargs_its_class_refuses_leave_nothing_on_disk(tiny_config):
    config = tiny_config({"training.run_name": "refused", "callbacks": QG.config.yaml_io.load_yaml_text(
        "[{type: !pyobject ddp_helpers.StopOnRank1, kwargs: {at_epoch: 0, when: later}}]")})
    with pytest.raises(QG.ConfigError, match=r"callbacks.0.kwargs: StopOnRank1\(\*\*kwargs\) failed: .*'when'"):
        QG.Trainer(config)
    assert not (Path(config["training"]["path"]) / "refused").exists()


@pytest.mark.parametrize("entry", ["{type: !pyobject subprocess.run}", "{kind: !pyobject ddp_helpers.StopOnRank1}"])
def test_a_callbacks_entry_that_is_not_a_callback_class_is_refused(tiny_config, entry):
    with pytest.raises(QG.ConfigError, match=r"callbacks: item 0: expected \{type: !pyobject module.CallbackClass"):
        tiny_config({"callbacks": [QG.config.yaml_io.load_yaml_text(entry)]})


def test_a_vote_on_rank_1_alone_stops_every_rank_at_the_same_epoch(tiny_config):
    config = tiny_config({"training.num_epochs": 4, "early_stopping.enabled": False})
    result = QG.launch(config, nproc=2, callbacks=[StopOnRank1(at_epoch=1)])
    assert [r["epoch"] for r in result["history"]] == [0, 1]
    assert result["summary"]["stop_reason"] == "rank 1 asked to stop at epoch 1"
    assert result["summary"]["stopped_by"] == "StopOnRank1"
    for rank in (0, 1):  # every rank says where it stopped in its own log
        log = (Path(result["run_dir"]) / "logs" / f"rank_{rank}.log").read_text()
        assert "training finished at epoch 1: rank 1 asked to stop at epoch 1" in log


def test_a_resumable_vote_checkpoints_and_the_same_run_continues_with_the_callbacks_state(tiny_config):
    config = tiny_config({"training.num_epochs": 3, "training.run_name": "window", "early_stopping.enabled": False})
    with pytest.raises(QG.common.errors.Preempted, match="a maintenance window after checkpointing epoch 0"):
        QG.launch(config, nproc=2, callbacks=[InterruptAtEpoch(0), ValError()])
    result = QG.launch(config, nproc=2, callbacks=[InterruptAtEpoch(0), ValError()])  # same run_name: continues
    assert [r["epoch"] for r in result["history"]] == [0, 1, 2]
    assert [r["epochs_seen"] for r in result["history"]] == [1, 2, 3], "ValError's count survived the resume"


def test_no_blocking_collective_per_training_step(tiny_config):
    """The SIGTERM check used to all-reduce a flag and read it at every optimizer step: a host sync per step
    on GPUs. Now the blocking collectives of an epoch do not depend on its number of batches."""
    counts = {}
    for samples in (60, 120):  # 3 and 5 batches per rank and epoch
        config = tiny_config({"training.num_epochs": 1, "data.num_samples": samples})
        per_rank = dict(spawn_ranks(count_blocking_collectives, 2, config))
        assert per_rank[0] == per_rank[1]
        counts[per_rank[0]["batches"]] = per_rank[0]["blocking"]
    (few, few_count), (many, many_count) = sorted(counts.items())
    assert many > few and many_count == few_count, counts


def test_a_step_vote_on_rank_1_interrupts_every_rank_one_step_later_and_the_run_resumes_there(tiny_config):
    config = tiny_config({"training.num_epochs": 2, "training.run_name": "interrupted"})
    with pytest.raises(QG.common.errors.Preempted, match=r"rank 1 needs the node after checkpointing epoch 0 \(batch 3\)"):
        QG.launch(config, nproc=2, callbacks=[InterruptAtStep(2)])
    run_dir = Path(config["training"]["path"]) / "interrupted"
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["in_epoch"]["epoch"] == 0 and state["in_epoch"]["completed_batches"] == 3
    result = QG.launch(config, nproc=2, callbacks=[InterruptAtStep(2)])
    assert [r["epoch"] for r in result["history"]] == [0, 1]


def test_a_callback_that_cannot_be_pickled_is_refused_before_any_rank_starts(tiny_config, tmp_path):
    from ddp_helpers import HoldsALambda

    config = tiny_config({"training.path": str(tmp_path / "runs")})
    with pytest.raises(QG.UserError, match="callbacks: QG.launch hands each rank a pickled copy of its callbacks"):
        QG.launch(config, nproc=2, callbacks=[HoldsALambda()])
    assert not (tmp_path / "runs").exists()


def test_the_decision_names_the_vote_it_follows():
    votes = [(0, "EarlyStopping", QG.Stop("patience")), (1, "SIGTERM", QG.Stop("stopped on SIGTERM", resumable=True))]
    decision = QG.Decision.from_votes(votes)
    assert (decision.reason, decision.resumable, decision.stopped_by) == ("stopped on SIGTERM", True, "SIGTERM")
    assert decision.voters == ("rank 0: EarlyStopping", "rank 1: SIGTERM")
    assert not QG.Decision.from_votes([]).stop


def test_a_step_vote_to_end_the_run_is_refused_it_would_pass_for_a_preemption():
    class EndsMidEpoch(QG.Callback):
        def on_step_end(self, trainer, epoch, completed_batches):
            return "enough"

    callbacks = CallbackList([EndsMidEpoch()], is_main=True)
    with pytest.raises(TypeError, match=r"EndsMidEpoch.on_step_end voted Stop\('enough'\); a step vote interrupts"):
        callbacks.votes("on_step_end", None, 0, 1)
    assert callbacks.votes("on_epoch_end", None, {}) == []  # the class has no epoch vote


def test_hooks_are_called_where_a_callback_implements_them_in_its_class_or_on_itself():
    """Only callbacks that implement a hook are called at it (on_step_end runs at every step); a hook set on an
    instance counts as implemented, as one overridden in the class."""
    class Counts(QG.Callback):
        calls = 0

        def on_step_end(self, state, epoch, completed_batches):
            Counts.calls += 1

    class Plain(QG.Callback):
        pass

    plain = Plain()
    plain.on_step_end = lambda state, epoch, completed_batches: QG.Stop("node drained", resumable=True)
    callbacks = CallbackList([Counts(), plain, QG.Callback()], is_main=True)
    assert callbacks.votes("on_step_end", None, 0, 1) == [(Plain.__qualname__, QG.Stop("node drained", resumable=True))]
    assert Counts.calls == 1 and [type(c).__name__ for c in callbacks.implementing("on_step_end")] == ["Counts", "Plain"]


def test_a_metric_a_callback_adds_from_a_later_epoch_gets_its_column(tmp_path):
    from QuantumGrav.runs.artifacts import MetricsCSV

    metrics = MetricsCSV(tmp_path / "metrics.csv")
    metrics.append({"epoch": 0, "val_loss": 0.5})
    metrics.append({"epoch": 1, "val_loss": 0.4, "val_error": 0.1})  # e.g. a callback added on a resume
    assert metrics.rows() == [{"epoch": "0", "val_loss": "0.5", "val_error": ""},
                              {"epoch": "1", "val_loss": "0.4", "val_error": "0.1"}]
