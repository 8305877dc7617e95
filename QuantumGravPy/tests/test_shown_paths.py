"""A run's output shows its folders as the user wrote them: relative to the working directory when they lie
inside it, so that logs, summaries and the notebooks' stored outputs do not carry this machine's folders."""

from __future__ import annotations

import QuantumGrav as QG
from QuantumGrav.common.files import shown_path
from QuantumGrav.runs.records import summarise_run


def test_a_path_inside_the_working_directory_is_shown_relative_and_one_outside_absolute(tmp_path, monkeypatch):
    inside, outside = tmp_path / "work", tmp_path / "elsewhere"
    (inside / "runs" / "run-1").mkdir(parents=True)
    outside.mkdir()
    monkeypatch.chdir(inside)
    assert shown_path(inside / "runs" / "run-1") == "runs/run-1"
    assert shown_path("runs/run-1") == "runs/run-1"
    assert shown_path(outside / "run-2") == str(outside / "run-2")


def test_a_run_under_the_working_directory_logs_and_summarises_its_folder_relative(tiny_config, tmp_path, monkeypatch,
                                                                                  collect_log):
    monkeypatch.chdir(tmp_path)
    messages = collect_log("QuantumGrav", "INFO")
    trainer = QG.Trainer(tiny_config({"training.path": "runs", "training.run_name": "here",
                                      "training.num_epochs": 1}))
    try:
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        test = trainer.run_test(test_loader)
    finally:
        trainer.close()
    (set_up,) = [m for m in messages if m.startswith("training set-up")]
    assert "run directory     runs/here\n" in set_up and str(tmp_path) not in set_up
    assert "run directory   runs/here\n" in summarise_run({"summary": dict(trainer.summary), "test": test})
