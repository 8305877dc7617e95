"""What the current release wrote keeps working: a run directory it made (config.yaml, metrics.csv,
summary.json, checkpoints) is read, validated and continued by this code.

data/run_of_release_0_1/ was written by the release before the package's regrouping into typed sections
and callbacks/ (two epochs of conftest's TINY config on 30 sets, data seed 3)."""

import csv
import shutil
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG

RELEASE_RUN = Path(__file__).parent / "data" / "run_of_release_0_1"


def copy_of_the_release_run(tmp_path: Path) -> Path:
    run = tmp_path / "release_0_1"
    shutil.copytree(RELEASE_RUN, run)
    return run


def test_the_release_runs_config_yaml_loads_to_the_same_values(tmp_path):
    run = copy_of_the_release_run(tmp_path)
    config = QG.load_config(run / "config.yaml")
    assert config["training"]["num_epochs"] == 2 and config["training"]["optimizer_type"] is torch.optim.AdamW
    assert config["model"]["hidden_channels"] == [16, 16] and config["data"]["num_samples"] == 30
    assert QG.load_config(dict(config)) == config  # a resolved config validates to itself


def test_a_run_of_the_release_is_continued_from_its_checkpoint(tmp_path, data_root):
    run = copy_of_the_release_run(tmp_path)
    config = QG.load_config(run / "config.yaml", {"training.resume": str(run), "training.num_epochs": 3,
                                                  "data.root": str(data_root), "training.path": str(tmp_path)})
    trainer = QG.Trainer(config)
    assert trainer.start_epoch == 2 and [row["epoch"] for row in trainer.history] == [0, 1]
    assert trainer.best_state is not None  # best.pt of the release, for the test
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    assert [row["epoch"] for row in trainer.history] == [0, 1, 2]
    assert trainer.run_test(test_loader)["num_test"] == len(trainer.split["test"])
    trainer.close()
    rows = (run / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 3
    low, high = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["training_range"]["num_elements"]
    assert 16 <= low <= high <= 24, "a continued run's new checkpoints record the training range"


def test_a_run_of_the_release_is_applied_to_new_data_and_says_it_records_no_training_range(tmp_path, data_root,
                                                                                           cli_in_process):
    """Its best.pt has neither model_io nor training_range: the model is rebuilt from the run's data (moved here:
    data.root points at this test's data), and every set is 'unknown' against the training range, with a note;
    refusing sets outside it cannot be done and says so."""
    run = copy_of_the_release_run(tmp_path)
    best = run / "checkpoints" / "best.pt"
    checkpoint = torch.load(best, weights_only=True)
    assert "training_range" not in checkpoint and "model_io" not in checkpoint
    checkpoint["config_yaml"] = checkpoint["config_yaml"].replace("/tmp/relrun/data", str(data_root))
    torch.save(checkpoint, best)
    data = tmp_path / "new_data.yaml"
    data.write_text(f"data: {{root: {data_root}, num_samples: 30, n_min: 16, n_max: 24, seed: 4, "
                    f"split: [0.6, 0.2, 0.2]}}\n")
    applied = QG.load_run(run)
    assert applied.training_range is None
    result = applied.evaluate(data, out=tmp_path / "p.csv")
    assert result["count"] == 30 and result["outside_training_range"] is None
    assert "its best.pt records no training range" in result["notes"][0]
    with open(tmp_path / "p.csv", newline="") as file:
        assert {row["outside_training_range"] for row in csv.DictReader(file)} == {"unknown"}
    with pytest.raises(QG.UserError, match="records no training range"):
        applied.evaluate(data, out=tmp_path / "refused.csv", out_of_range="refuse")
    assert not (tmp_path / "refused.csv").exists()
    done = cli_in_process("evaluate", "--run", str(run), "--data", str(data), "--out", str(tmp_path / "cli.csv"),
                          cwd=tmp_path)
    assert done.returncode == 0 and "its best.pt records no training range" in done.stdout, done.stderr


def test_the_previous_releases_module_paths_still_import(tmp_path):
    """Modules that moved (issue 50: the root's plumbing into common/, config's sections into config/sections/)
    keep their old paths for what a user saved: a script's import, a pickle, a ``!pyobject`` name. Each gives
    the same objects as the new path."""
    import importlib
    import pickle

    from QuantumGrav.common import errors
    from QuantumGrav.config.sections.base import FrozenDict
    from QuantumGrav.config.sections.training import LoopSection
    from QuantumGrav.config.yaml_io import resolve_pyobject

    assert importlib.import_module("QuantumGrav.errors") is errors
    from QuantumGrav.errors import UserError  # as a script of the previous release wrote it
    from QuantumGrav.config.learning_sections import ModelSection, metric_mode
    from QuantumGrav.config.training_sections import LoadersSection, OptimizerSection

    assert UserError is QG.UserError and ModelSection is QG.load_config(None).sections.model.__class__
    assert metric_mode("val_accuracy") == "max" and {LoadersSection.__name__, OptimizerSection.__name__} == \
        {"LoadersSection", "OptimizerSection"}
    assert resolve_pyobject("QuantumGrav.logging_utils.get_logger") is QG.get_logger
    # pickles written by the previous release name the old modules
    for value, new, old in ((QG.UserError("bad data"), b"QuantumGrav.common.errors", b"QuantumGrav.errors"),
                            (FrozenDict({"lr": 1e-3}), b"QuantumGrav.config.sections.base", b"QuantumGrav.config.section"),
                            (LoopSection(), b"QuantumGrav.config.sections.training",
                             b"QuantumGrav.config.training_sections")):
        written = pickle.dumps(value, protocol=0)
        assert new in written
        read = pickle.loads(written.replace(new, old))
        assert type(read) is type(value) and (read.args if isinstance(read, Exception) else read) == \
            (value.args if isinstance(value, Exception) else value)
