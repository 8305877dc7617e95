"""Config loading: the !pyobject loader, defaults, overrides and one clear message per mistake."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import dump_config, find_unimportable, parse_override, read_config_file

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
        from QuantumGrav.studies.config import read_study_config

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


def test_configuration_reference_is_the_schema_and_up_to_date():
    from QuantumGrav.config.layout import schema
    from QuantumGrav.config.reference import COMMAND, SECTIONS, leaf_keys, reference_markdown

    text = (REPO / "docs" / "configuration.md").read_text()
    assert text == reference_markdown(), f"docs/configuration.md is out of date: run {COMMAND}"
    assert set(SECTIONS) == set(schema()), "every top-level key of the schema needs its introduction"
    for key, field in leaf_keys(schema()):
        assert field.doc, f"{key} has no explanation (its Field's doc in config/schema.py)"
        assert f"\n- `{key}` (default `" in text, key


def test_configuration_reference_is_plain_commonmark_with_a_heading_per_section():
    """The Sphinx site includes the file as it is (MyST): CommonMark without raw HTML, and every key's text as
    written in the schema (no '**kwargs' turned bold, no '<timestamp>' read as a tag)."""
    markdown_it = pytest.importorskip("markdown_it")
    from QuantumGrav.config.layout import schema

    tokens = markdown_it.MarkdownIt("commonmark").parse((REPO / "docs" / "configuration.md").read_text())
    assert not [t for t in tokens if t.type.startswith("html")]
    inline = [child for t in tokens if t.type == "inline" for child in t.children]
    assert not [t for t in inline if t.type.startswith(("html", "em_", "link_"))]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    assert [h for h in headings if h.startswith("`")] == [f"`{name}`" for name in schema()]
    texts = "".join(child.content for child in inline if child.type == "text")
    assert "run-<timestamp>-<random>" in texts and "**optimizer_kwargs" in texts and "__main__" in texts


def _flat(config, prefix=""):
    """{dotted key: value} of a config, mappings (sections and mapping values alike) opened."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _resolved(name, monkeypatch):
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST", raising=False)  # smoke mode caps what a file states
    return _flat(QG.load_config(REPO / "configs" / name))


# What a reader of configs/train.yaml needs to see without opening the reference: the data, the model, the
# optimizer and its schedule, early stopping, and the batch sizes that set the job's memory and speed.
STATED_IN_TRAIN_YAML = [
    "training.num_epochs", "training.batch_size", "training.optimizer_type", "training.optimizer_kwargs.lr",
    "training.optimizer_kwargs.weight_decay", "training.scheduler_type", "model.conv", "model.conv_kwargs.heads",
    "model.conv_kwargs.concat", "model.hidden_channels", "model.directions", "model.graph_features", "model.norm",
    "model.dropout", "model.pooling", "model.head_hidden", "validation.batch_size", "testing.batch_size",
    "early_stopping.metric", "early_stopping.patience", "early_stopping.min_delta", "data.num_samples",
    "data.n_min", "data.n_max", "data.split", "data.seed"]


def test_the_library_defaults_are_the_default_job(monkeypatch):
    """A config that leaves a key out gets configs/train.yaml's value: the file states only defaults, and
    the keys a reader of the default job needs."""
    defaults = _flat(QG.load_config(None))
    job = _resolved("train.yaml", monkeypatch)
    assert {k: (defaults.get(k, "<none>"), job.get(k, "<none>")) for k in set(defaults) | set(job)
            if defaults.get(k, "<none>") != job.get(k, "<none>")} == {}
    stated = _flat(read_config_file(REPO / "configs" / "train.yaml"))
    assert [key for key in STATED_IN_TRAIN_YAML if key not in stated] == []


# What configs/train_ddp.yaml may state that train.yaml does not (the resolved values must still be equal but
# for the parallel section), and why.
DDP_ONLY_KEYS = {
    "parallel.": "the DDP job's own section",
    "training.lr_scaling": "DDP changes the effective batch: shown at its default, to be changed with the batch",
    "training.drop_last": "DDP pads the shards to equal length: shown at its default",
    "training.checkpoint_at": "long multi-process jobs keep periodic checkpoints: shown at its default",
}
# Resolved values that may differ between the two jobs, and why.
DDP_DIFFERENT_VALUES = {"parallel.world_size": "the DDP job runs 2 processes, the default job 1"}


def test_train_ddp_yaml_is_train_yaml_plus_parallel(monkeypatch):
    single, ddp = (read_config_file(REPO / "configs" / name) for name in ("train.yaml", "train_ddp.yaml"))
    single, ddp = _flat(single), _flat(ddp)
    assert {k: (v, ddp.get(k, "<missing>")) for k, v in single.items() if ddp.get(k, "<missing>") != v} == {}
    extra = [k for k in ddp if k not in single and not any(k.startswith(allowed) for allowed in DDP_ONLY_KEYS)]
    assert extra == [], "list the key in DDP_ONLY_KEYS with the reason, or state it in train.yaml too"
    single, ddp = _resolved("train.yaml", monkeypatch), _resolved("train_ddp.yaml", monkeypatch)
    assert sorted(k for k in single if single[k] != ddp[k]) == sorted(DDP_DIFFERENT_VALUES)


# Upstream's stopping rule: each epoch's weighted F1, a grace of 8 epochs, patience 12, up to 100 epochs.
UPSTREAM_STOPPING = ("early_stopping.metric", "early_stopping.mode", "early_stopping.window", "early_stopping.grace",
                     "early_stopping.patience", "training.num_epochs")
# Where each of the other shipped configs may differ from the default job (its comments say why).
# The nine kinds' configs switch on the recall per kind and against each defect's size (an analysis: callbacks).
OTHER_CONFIGS = {
    # QuantumGrav.jl's stores, read in workers
    "train_quantumgrav_jl.yaml": ("data.", "training.num_workers", "callbacks"),
    # the nine kinds, as stores read in workers, and the strong baseline and the strongest rival made for them
    "manifold_like.yaml": ("data.", "training.num_workers", "testing.strong_baseline", "testing.strongest_baseline",
                           "callbacks"),
    # the same question with the sprinklings in 3 (or 4) dimensions
    "manifold_like_dimensions.yaml": ("data.", "training.num_workers", "testing.strong_baseline",
                                      "testing.strongest_baseline", "callbacks"),
    # upstream QuantumGrav's model, optimizer and stopping metric on manifold_like.yaml's data (checked below)
    "upstream_gcn.yaml": ("data.", "training.num_workers", "testing.strong_baseline", "model.", "training.batch_size",
                          "training.optimizer_kwargs.", "training.scheduler_type", "callbacks", *UPSTREAM_STOPPING),
    # the same, its training batches drawn class-balanced (upstream's balanced variant)
    "upstream_gcn_balanced.yaml": ("data.", "training.num_workers", "testing.strong_baseline", "model.",
                                   "training.batch_size", "training.optimizer_kwargs.", "training.scheduler_type",
                                   "training.sampler", "callbacks", *UPSTREAM_STOPPING),
    # merged sets as stores read in workers; per element: the node task, stopped on its F1
    "inserted_block.yaml": ("data.", "training.num_workers", "task.type", "early_stopping.metric",
                            "early_stopping.mode"),
    # destroyed sets with exact k as stores read in workers; per pair: the relation task
    "toggled_relations.yaml": ("data.", "training.num_workers", "task.type"),
    "train_regression.yaml": ("data.target", "model.", "training.optimizer_kwargs.", "early_stopping.metric"),
}


@pytest.mark.parametrize("name", sorted(OTHER_CONFIGS))
def test_the_other_configs_differ_from_the_default_job_only_where_they_say(name, monkeypatch):
    job, other = _resolved("train.yaml", monkeypatch), _resolved(name, monkeypatch)
    differ = [k for k in sorted(set(job) | set(other)) if job.get(k) != other.get(k)]
    assert [k for k in differ if not k.startswith(OTHER_CONFIGS[name])] == []


def test_upstreams_model_trains_on_the_data_of_manifold_like_yaml(monkeypatch):
    ours, upstream = _resolved("manifold_like.yaml", monkeypatch), _resolved("upstream_gcn.yaml", monkeypatch)
    assert {k: v for k, v in ours.items() if k.startswith("data.")} == {
        k: v for k, v in upstream.items() if k.startswith("data.")}
    balanced = _resolved("upstream_gcn_balanced.yaml", monkeypatch)
    assert [k for k in sorted(upstream) if upstream[k] != balanced.get(k)] == ["training.sampler"]
    assert (upstream["early_stopping.grace"], upstream["early_stopping.patience"], upstream["training.num_epochs"],
            upstream["model.kwargs.batch_norm_momentum"]) == (8, 12, 100, 0.2)


def test_a_study_config_is_the_default_jobs_task_and_data(monkeypatch):
    from QuantumGrav.studies.config import read_study_config

    pytest.importorskip("optuna")
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST", raising=False)
    job, (_, base) = _resolved("train.yaml", monkeypatch), read_study_config(REPO / "configs" / "tune.yaml")
    base = _flat(base)
    assert {k: (job[k], base[k]) for k in job if k.startswith(("data.", "task.")) and job[k] != base[k]} == {}


def test_changing_only_the_convolution_names_conv_kwargs(tiny_config):
    """The default conv_kwargs are TransformerConv's: a config that changes only model.conv gets one message
    naming the key and the fix, not a TypeError of PyG's."""
    graph_conv = QG.config.yaml_io.resolve_pyobject("torch_geometric.nn.GraphConv")
    with pytest.raises(QG.ConfigError, match=r"model.conv_kwargs: GraphConv rejects \{'heads': 2, 'concat': False\}"
                                             r".*--set 'model.conv_kwargs=\{\}'"):
        QG.Trainer(tiny_config({"model.conv": graph_conv, "model.conv_kwargs": {"heads": 2, "concat": False}}))


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
    import QuantumGrav.config.schema as config_module
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
