"""Config loading: the !pyobject loader, defaults, overrides and one clear message per mistake."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import QuantumGrav as QG
from QuantumGrav.config import dump_config, find_unimportable, parse_override, read_config_file

REPO = Path(__file__).resolve().parents[2]


def test_pyobject_tag_resolves_to_the_python_object():
    config = yaml.load("opt: !pyobject torch.optim.AdamW\nloss: !pyobject torch.nn.functional.cross_entropy",
                       QG.get_loader())
    assert config["opt"] is torch.optim.AdamW
    assert config["loss"] is torch.nn.functional.cross_entropy


def test_exponent_without_dot_is_a_float():
    assert yaml.load("lr: 1e-3", QG.get_loader())["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    if "tune" in read_config_file(path):  # a study config: a training config plus its tune section
        from QuantumGrav.study_config import read_study_config

        settings, config = read_study_config(path)
        assert settings.space.dimensions
    else:
        config = QG.load_config(path)
    assert config["training"]["batch_size"] >= 1


def test_defaults_are_filled_and_resolved_config_round_trips():
    config = QG.load_config({"training": {"num_epochs": 3}})
    assert config["training"]["num_epochs"] == 3
    assert config["training"]["batch_size"] == 32
    assert config["early_stopping"]["mode"] == "min"
    again = QG.load_config(yaml.load(dump_config(config), QG.get_loader()))
    assert again == config


def test_overrides_from_strings_and_mappings():
    config = QG.load_config(None, ["training.num_epochs=3", "model.conv=!pyobject torch_geometric.nn.GCNConv",
                                   "data.dimensions=[2, 4]",
                                   "data.classes=[minkowski_2d, minkowski_4d, layered]"])
    assert config["training"]["num_epochs"] == 3
    assert config["model"]["conv"].__name__ == "GCNConv"
    assert config["data"]["dimensions"] == [2, 4]
    assert QG.load_config(None, {"training.batch_size": 7})["training"]["batch_size"] == 7
    assert parse_override("training.run_name=abc") == ("training.run_name", "abc")


def test_a_python_override_may_name_an_object_as_pyobject_text_like_set_does():
    config = QG.load_config(REPO / "configs" / "train.yaml", {"criterion": "!pyobject torch.nn.functional.mse_loss",
                                                              "training.run_name": "a: b"})
    assert config["criterion"] is torch.nn.functional.mse_loss
    assert config["training"]["run_name"] == "a: b"  # other strings are not read as YAML
    with pytest.raises(QG.ConfigError, match=r"criterion: expected an importable Python object .*no_such_loss"):
        QG.load_config(None, {"criterion": "!pyobject torch.nn.functional.no_such_loss"})


BAD_CONFIGS = [
    ({"training": {"batch_size": 0}}, "training.batch_size: expected an integer >= 1, got 0"),
    ({"training": {"batch_size": "32"}}, "training.batch_size: expected an integer >= 1, got '32'"),
    ({"training": {"batch_sise": 8}}, "training.batch_sise: unknown key; did you mean 'batch_size'?"),
    ({"trainig": {}}, "trainig: unknown key; did you mean 'training'?"),
    ({"training": {"optimizer_type": "AdamW"}}, "training.optimizer_type: expected a Python class or function"),
    ({"training": {"device": "gpu"}}, "training.device: expected one of 'auto', 'cpu', 'cuda', got 'gpu'"),
    ({"training": {"amp": "fp8"}}, "training.amp: expected one of 'off', 'fp16', 'bf16', got 'fp8'"),
    ({"training": {"optimizer_kwargs": {"lr": -1}}}, "training.optimizer_kwargs.lr: expected a number > 0"),
    ({"model": {"dropout": 1.5}}, "model.dropout: expected a number >= 0.0 and <= 0.99, got 1.5"),
    ({"model": {"hidden_channels": []}}, "model.hidden_channels: expected a list with at least 1 item(s)"),
    ({"model": {"hidden_channels": [64, "x"]}}, "model.hidden_channels: item 1: expected an integer >= 1, got 'x'"),
    ({"data": {"n_min": 100, "n_max": 50}}, "data.n_min: expected n_min <= n_max"),
    ({"data": {"split": [0.5, 0.2, 0.2]}}, "data.split: expected three fractions that sum to 1"),
    ({"data": {"dimensions": [5]}}, "data.dimensions: item 0: expected one of 2, 3, 4, got 5"),
    ({"data": {"dimensions": [2, 3]}}, "data.classes: 'minkowski_4d' needs dimension 4 in data.dimensions"),
    ({"early_stopping": {"metric": "accuracy"}}, "early_stopping.metric: expected one of 'val_loss', 'val_accuracy'"),
    ({"parallel": {"master_port": 70000}}, "parallel.master_port: expected an integer between 1 and 65535"),
    ({"parallel": {"find_unused_parameters": "yes"}}, "parallel.find_unused_parameters: expected true or false"),
    ({"training": []}, "training: expected a mapping (section), got list []"),
    ({"training": {"run_name": "../escape"}}, "training.run_name: expected a plain folder name"),
    ({"validation": {"drop_last": True}}, "validation.drop_last: unknown key"),
    ({"training": {"optimizer_kwargs": {"lr": float("nan")}}}, "training.optimizer_kwargs.lr: expected a number > 0"),
    ({"training": {"progress_bar": 0}}, "training.progress_bar: expected one of 'auto', True, False, got 0"),
    ({"criterion": torch.nn.CrossEntropyLoss()}, "criterion: expected a Python class or function given as "
                                                 "!pyobject package.module.name (not an instance"),
]


@pytest.mark.parametrize("config, message", BAD_CONFIGS, ids=[m.split(":")[0] for _, m in BAD_CONFIGS])
def test_bad_config_names_the_key_and_what_was_expected(config, message):
    with pytest.raises(QG.ConfigError) as info:
        QG.load_config(config)
    assert message in str(info.value)


def test_unimportable_pyobject_names_key_and_path():
    config = yaml.load("criterion: !pyobject torch.nn.functional.no_such_loss", QG.get_loader())
    with pytest.raises(QG.ConfigError, match=r"criterion: expected an importable Python object .*no_such_loss"):
        QG.load_config(config)


def test_all_problems_are_reported_together():
    with pytest.raises(QG.ConfigError, match=r"\(2 problems\)"):
        QG.load_config({"training": {"batch_size": 0, "num_epochs": 0}})


def test_notebook_defined_functions_are_found():
    def local_loss(out, y):
        return out.sum()

    found = find_unimportable({"criterion": local_loss, "training": {"optimizer_type": torch.optim.SGD}})
    assert [key for key, _ in found] == ["criterion"]


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "QuantumGrav", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_cli_bad_config_exits_2_without_traceback_and_writes_nothing(tmp_path):
    (tmp_path / "bad.yaml").write_text("training:\n  batch_size: 0\n  path: runs\n")
    result = _cli("train", "--config", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert "training.batch_size: expected an integer >= 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


@pytest.mark.parametrize("args, message", [
    (("train", "--config", "missing.yaml"), "config file 'missing.yaml' does not exist (looked in "),
    (("train", "--config", "."), "config file '.' is a folder, not a file"),
    (("train", "--config", "binary.yaml"), "binary.yaml: cannot read it as a UTF-8 text file"),
    (("train", "--config", "broken.yaml"), "broken.yaml: not valid YAML at line 3, column 13: expected ',' or ']'"),
    (("train", "--config", "ok.yaml", "--resume", "runs/exp #3"), "runs/exp #3' has no checkpoints/last.pt"),
    (("train", "--config", "ok.yaml", "--set", "training.num_epochs"), "expected section.key=value"),
    (("train", "--config", "ok.yaml", "--set", "training.num_epochs=[1"), "the value is not valid YAML"),
    (("train", "--nproc", "two"), "argument --nproc: expected an integer >= 1, got 'two'"),
    (("train", "--nproc", "0"), "argument --nproc: expected an integer >= 1, got 0"),
    (("doctor", "--port", "70000"), "argument --port: expected a port between 1 and 65535, got 70000"),
])
def test_cli_bad_command_lines_exit_2(tmp_path, args, message, cli_in_process):
    (tmp_path / "ok.yaml").write_text("training:\n  num_epochs: 1\n")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe training")
    (tmp_path / "broken.yaml").write_text("training:\n  hidden: [1, 2\n  num_epochs: 1\n")
    result = cli_in_process(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_partial_configs_merge_in_order():
    config = QG.load_config([REPO / "configs" / "train_ddp.yaml", REPO / "configs" / "logger" / "wandb_ddp.yaml"],
                            ["logger.wandb.mode=disabled"])
    assert config["parallel"]["world_size"] == 2
    assert config["logger"]["wandb"]["mode"] == "disabled"
    assert config["logger"]["wandb"]["tags"] == ["ddp", "causal-sets"]


def test_configuration_reference_in_docs_is_up_to_date():
    from QuantumGrav.config import reference_markdown

    text = (REPO / "docs" / "configuration.md").read_text()
    assert reference_markdown() in text, "regenerate the table with the command in docs/configuration.md"


@pytest.mark.parametrize("key, message", [
    ("data.root", "data.root: cannot read or write the data cache in '/proc/no-such-dir'"),
    ("training.path", "training.path: cannot create the run directory '/proc/no-such-dir/"),
])
def test_cli_unwritable_folders_exit_2_and_leave_no_run(tmp_path, key, message, cli_in_process):
    (tmp_path / "tiny.yaml").write_text("training:\n  num_epochs: 1\n  path: runs\ndata:\n  root: data\n"
                                        "  num_samples: 30\n  n_min: 8\n  n_max: 12\n")
    result = cli_in_process("train", "--config", "tiny.yaml", "--set", f"{key}=/proc/no-such-dir", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_module_whose_own_import_is_missing_names_that_import(tmp_path, monkeypatch):
    (tmp_path / "qg_ext_module.py").write_text("import qg_ext\n")  # the module exists; qg_ext does not
    monkeypatch.syspath_prepend(str(tmp_path))
    config = yaml.load("criterion: !pyobject qg_ext_module.loss", QG.get_loader())
    with pytest.raises(QG.ConfigError, match=r"'qg_ext_module.loss' does not import: No module named 'qg_ext'$"):
        QG.load_config(config)


def test_a_config_is_validated_once_per_process_on_the_cli_and_launch_paths(tmp_path, tiny_config, monkeypatch,
                                                                            cli_in_process):
    """Where a config enters (the CLI, QG.launch) it is validated; the trainer and the workers, which receive
    it validated, do not validate it again (each worker counts from the moment it receives it)."""
    import QuantumGrav.config as config_module
    from ddp_helpers import CountValidations

    path = tmp_path / "tiny.yaml"
    path.write_text(dump_config(tiny_config({"training.num_epochs": 1})))
    validate, counted = config_module.validate_config, []
    monkeypatch.setattr(config_module, "validate_config", lambda *a, **k: counted.append(1) or validate(*a, **k))
    assert cli_in_process("train", "--config", str(path), cwd=tmp_path).returncode == 0
    assert len(counted) == 1, "the CLI, the launcher and the trainer in one process: one validation"
    counted.clear()
    QG.launch(path, nproc=2, callbacks=[CountValidations(str(tmp_path))])
    assert len(counted) == 1, "QG.launch validates the file once"
    assert [(tmp_path / f"validations_rank_{r}.txt").read_text() for r in (0, 1)] == ["0", "0"]
    counted.clear()
    config = QG.load_config(path)
    config["training"]["num_epochs"] = 2  # edited after validation (a notebook's habit): validated again
    trainer = QG.Trainer(config)
    trainer.close()
    assert len(counted) == 2 and trainer.config["training"]["num_epochs"] == 2


def test_a_study_config_given_to_train_says_to_run_it_with_tune(cli_in_process):
    done = cli_in_process("train", "--config", str(REPO / "configs" / "tune.yaml"), cwd=REPO)
    assert done.returncode == 2
    assert "tune: unknown key; this is a study config: run it with python -m QuantumGrav tune" in done.stderr
