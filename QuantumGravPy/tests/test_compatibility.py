"""What the current release wrote keeps working: a run directory it made (config.yaml, metrics.csv,
summary.json, checkpoints) is read, validated and continued by this code.

data/run_of_release_0_1/ was written by the release before the package's regrouping into typed sections
and callbacks/ (two epochs of conftest's TINY config on 30 sets, data seed 3)."""

import csv
import importlib
import pickletools
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject

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


# The module paths that moved at the regrouping into common/ and config/sections/ (issue 50), which an import hook kept
# importable until issue 62 found that nothing shipped or stored names them.
MOVED_PATHS = ("QuantumGrav.errors", "QuantumGrav.files", "QuantumGrav.processes", "QuantumGrav.logging_utils",
               "QuantumGrav.version", "QuantumGrav.config.section", "QuantumGrav.config.data_section",
               "QuantumGrav.data.store_cache", "QuantumGrav.data.store_graphs", "QuantumGrav.data.store_limits",
               "QuantumGrav.config.learning_sections", "QuantumGrav.config.training_sections")
PYOBJECT = re.compile(r"!pyobject\s+'?(QuantumGrav(?:\.\w+)+)")


def names_in_stored_checkpoint(path: Path) -> set[str]:
    """The QuantumGrav names a checkpoint needs to load and run: the module paths its pickle names, and the
    ``!pyobject`` names of the config it carries."""
    with zipfile.ZipFile(path) as archive:
        pickled = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
    names = {arg for _, arg, _ in pickletools.genops(pickled) if isinstance(arg, str) and arg.startswith("QuantumGrav")}
    return names | set(PYOBJECT.findall(torch.load(path, weights_only=True).get("config_yaml", "")))


def test_what_shipped_configs_and_stored_runs_name_imports_and_the_moved_paths_are_gone():
    """Every QuantumGrav name a shipped config (configs/, the YAML of docs/ and benchmarks/ results) or a stored run
    (its config.yaml, its checkpoints' pickles and configs) needs resolves in this package as it is, with no import
    hook; so the hook for the moved paths, which none of them names, is gone, and those paths import no more."""
    repo = RELEASE_RUN.parents[3]
    texts = [*repo.glob("configs/*.yaml"), *repo.glob("docs/**/*.md"), *repo.glob("benchmarks/**/*.json"),
             RELEASE_RUN / "config.yaml"]
    needed = {name for path in texts for name in PYOBJECT.findall(path.read_text(encoding="utf-8"))}
    needed |= {name for checkpoint in RELEASE_RUN.glob("checkpoints/*.pt") for name in
               names_in_stored_checkpoint(checkpoint)}
    assert "QuantumGrav.models.sparse_attention.SparseTransformerConv" in needed  # the default model's conv
    for name in needed:
        assert resolve_pyobject(name) is not None, name
    assert not needed & set(MOVED_PATHS)
    assert not [finder for finder in sys.meta_path if type(finder).__module__.startswith("QuantumGrav")]
    for old in MOVED_PATHS:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
