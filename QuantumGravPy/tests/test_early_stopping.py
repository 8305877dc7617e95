"""Early stopping: patience, min_delta, modes, NaN epochs, and what a checkpoint restores."""

import math

import QuantumGrav as QG
from QuantumGrav.callbacks.early_stopping import EarlyStopping


def test_patience_and_min_delta_in_min_mode():
    es = EarlyStopping(metric="val_loss", mode="min", patience=2, min_delta=0.1)
    assert es.update(1.0, 0) and not es.should_stop
    assert not es.update(0.95, 1)  # better, but not by more than min_delta
    assert not es.update(0.99, 2) and es.should_stop
    assert (es.best_epoch, es.best_value) == (0, 1.0)


def test_max_mode_counts_increases():
    es = EarlyStopping(metric="val_accuracy", mode="max", patience=1)
    assert es.update(0.5, 0) and es.update(0.6, 1) and not es.update(0.6, 2) and es.should_stop


def test_nan_epochs_are_never_the_best():
    es = EarlyStopping(patience=2)
    assert not es.update(math.nan, 0)
    assert es.update(1.0, 1) and es.best_epoch == 1
    assert not es.update(math.nan, 2)


def test_a_checkpoint_restores_progress_but_not_the_settings():
    old = EarlyStopping(patience=5, min_delta=0.0)
    old.update(1.0, 0)
    old.update(2.0, 1)
    resumed = EarlyStopping(patience=1, min_delta=100.0)
    resumed.load_state_dict(old.state_dict())
    assert (resumed.best_value, resumed.best_epoch, resumed.epochs_without_improvement) == (1.0, 0, 1)
    assert (resumed.patience, resumed.min_delta) == (1, 100.0) and resumed.should_stop


def test_a_checkpoint_of_another_metric_or_mode_starts_the_count_afresh(collect_log):
    warnings = collect_log("QuantumGrav.early_stopping")
    old = EarlyStopping(metric="val_loss", mode="min")
    old.update(0.9, 0)
    old.update(1.0, 1)
    resumed = EarlyStopping(metric="val_accuracy", mode="max", patience=2)
    resumed.load_state_dict(old.state_dict())
    assert (resumed.best_epoch, resumed.epochs_without_improvement) == (-1, 0), "a loss is no accuracy to beat"
    assert len(warnings) == 1 and "tracked val_loss (min), this config tracks val_accuracy (max)" in warnings[0]
    assert resumed.update(0.5, 2) and resumed.best_value == 0.5


def test_disabled_early_stopping_never_stops_but_still_tracks_the_best():
    stopper = EarlyStopping(patience=1, enabled=False)
    for epoch, value in enumerate([1.0, 2.0, 3.0, 4.0]):
        stopper.update(value, epoch)
    assert not stopper.should_stop and (stopper.best_value, stopper.best_epoch) == (1.0, 0)


def test_from_config_and_the_stop_reason_name_the_metric_and_its_best():
    stopper = EarlyStopping.from_config({"metric": "val_accuracy", "mode": "max", "patience": 1, "min_delta": 0.01,
                                         "enabled": True})
    stopper.update(0.8, 0)
    stopper.update(0.805, 1)  # not better by more than min_delta
    assert stopper.should_stop
    assert stopper.reason() == ("early stopping: val_accuracy did not improve by more than 0.01 for 1 epoch(s); "
                                "best val_accuracy=0.8000 at epoch 0")


def test_as_a_callback_it_votes_to_stop_after_patience_and_says_whether_the_epoch_was_the_best():
    es = EarlyStopping(metric="val_loss", patience=2)
    votes = [es.on_epoch_end(None, {"epoch": e, "val_loss": v}) for e, v in enumerate([1.0, 0.5, 0.7])]
    assert votes == [None, None, None] and not es.improved
    assert es.on_epoch_end(None, {"epoch": 3, "val_loss": 0.6}) == QG.Stop(es.reason())
    assert "best val_loss=0.5000 at epoch 1" in es.reason()
    assert "improved" not in es.state_dict()  # a flag of the last epoch, not progress a resume needs
    disabled = EarlyStopping(metric="val_loss", patience=1, enabled=False)
    assert [disabled.on_epoch_end(None, {"epoch": e, "val_loss": v}) for e, v in enumerate([1.0, 2.0, 3.0])] == \
        [None] * 3 and disabled.best_epoch == 0


def test_one_lucky_epoch_is_not_the_best_of_a_window():
    """The validation loss of the default job before batch norm was recomputed: a lucky low at epoch 4
    between higher values. Alone it is the best and ends the run 10 epochs later; in a window of 3 the
    steadily better epochs after it are."""
    losses = [0.30, 0.20, 0.14, 0.60, 0.035, 0.09, 0.17, 1.06, 0.21, 0.037, 0.05, 0.045, 0.04, 0.038, 0.036]
    alone, windowed = EarlyStopping(patience=10, window=1), EarlyStopping(patience=10, window=3)
    for epoch, loss in enumerate(losses):
        alone.update(loss, epoch)
        windowed.update(loss, epoch)
    assert alone.best_epoch == 4 and alone.should_stop
    assert windowed.best_epoch == 14 and not windowed.should_stop
    assert windowed.best_value == sum(losses[-3:]) / 3


def test_a_resumed_run_continues_the_window():
    old = EarlyStopping(patience=5, window=3)
    for epoch, loss in enumerate([1.0, 0.5, 0.9]):
        old.update(loss, epoch)
    resumed = EarlyStopping(patience=5, window=3)
    resumed.load_state_dict(old.state_dict())
    uninterrupted = EarlyStopping(patience=5, window=3)
    for epoch, loss in enumerate([1.0, 0.5, 0.9]):
        uninterrupted.update(loss, epoch)
    assert resumed.update(0.4, 3) == uninterrupted.update(0.4, 3)
    assert resumed.state_dict() == uninterrupted.state_dict()
    legacy = {k: v for k, v in old.state_dict().items() if k not in ("recent", "window")}
    fresh = EarlyStopping(patience=5, window=3)
    fresh.load_state_dict(legacy)  # a checkpoint written before the window existed
    assert fresh.recent == [] and fresh.best_epoch == old.best_epoch


def test_a_grace_period_keeps_the_first_epochs_out_of_the_patience_count():
    without, graced = EarlyStopping(patience=2), EarlyStopping(patience=2, grace=3)
    values = [1.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    stopped = {}
    for name, es in (("without", without), ("graced", graced)):
        for epoch, value in enumerate(values):
            es.update(value, epoch)
            if es.should_stop:
                stopped[name] = epoch
                break
    # without: epochs 1 and 2 use up the patience; graced: epochs 1 and 2 are in the grace (3 epochs), 3 and 4 count
    assert stopped == {"without": 2, "graced": 4}
    assert graced.best_epoch == 0 and "after a grace of 3 epoch(s)" in graced.reason()


def test_a_checkpoint_keeps_the_grace_periods_progress():
    old = EarlyStopping(patience=2, grace=4)
    for epoch, value in enumerate([1.0, 2.0, 2.0]):
        old.update(value, epoch)
    resumed = EarlyStopping(patience=2, grace=4)
    resumed.load_state_dict(old.state_dict())
    assert resumed.epochs_seen == 3 and resumed.epochs_without_improvement == 0
    resumed.update(2.0, 3)  # the fourth epoch: still in the grace
    resumed.update(2.0, 4)
    assert resumed.epochs_without_improvement == 1 and not resumed.should_stop
    written_before_grace = {k: v for k, v in old.state_dict().items() if k != "epochs_seen"}
    resumed = EarlyStopping(patience=2, grace=4)
    resumed.load_state_dict(written_before_grace)
    assert resumed.epochs_seen == 4  # such a run counted every epoch: its grace is over
