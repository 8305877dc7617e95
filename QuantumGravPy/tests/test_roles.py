"""Every `!pyobject` key has a role, checked in validation: a config cannot make the library call what its
key does not take (QuantumGrav.config.roles). Each refusal is one line naming the key, the role and what was given;
the CLI exits 2 and nothing named was called (the helpers leave a file behind when they are)."""

import subprocess
import sys

import pytest
import torch
import yaml

import QuantumGrav as QG
from QuantumGrav.config.checks import Invalid
from QuantumGrav.config.yaml_io import dump_config, load_yaml_text, resolve_pyobject
from QuantumGrav.config.layout import schema
from QuantumGrav.config.roles import function_origin
from role_helpers import EVIDENCE, causal_sets_from_a_function, leave_evidence

ISSUE_YAML = 'data:\n  type: !pyobject subprocess.run\n  kwargs: {args: "touch pwned", shell: true}\n'
DATASET = ("a dataset class (a subclass of torch_geometric.data.Dataset or torch.utils.data.Dataset) or a dataset "
           "factory marked with @QuantumGrav.dataset_factory")
LOSS = ("a loss (a torch.nn.Module class, a function of torch.nn.functional, a function of your own code, or one "
        "marked with @QuantumGrav.loss_function)")
NO_ROLE = "!pyobject role_helpers.LeavesEvidence"


def test_the_issues_config_is_refused_by_the_real_cli_before_anything_runs(tmp_path):
    (tmp_path / "it.yaml").write_text(ISSUE_YAML)
    result = subprocess.run([sys.executable, "-m", "QuantumGrav", "train", "--config", "it.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert f"  - data.type: expected {DATASET}, got !pyobject subprocess.run\n" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it.yaml"]  # no pwned, no run directory, no data


def _section_yaml(key: str, value: str) -> str:
    section, _, leaf = key.partition(".")
    return f"{section}:\n  {leaf}: {value}\n" if leaf else f"{key}: {value}\n"


# Each would be called on the old code (after a tiny data set is generated) and leave the evidence behind.
SIBLINGS = [
    ("data.type", "!pyobject role_helpers.leave_evidence",
     f"data.type: expected {DATASET}, got !pyobject role_helpers.leave_evidence"),
    ("model.type", NO_ROLE, f"model.type: expected a model class (a subclass of torch.nn.Module), got {NO_ROLE}"),
    ("model.conv", NO_ROLE, "model.conv: expected a message-passing layer class (a subclass of torch.nn.Module, "
                            f"such as torch_geometric.nn.GraphConv), got {NO_ROLE}"),
    ("training.optimizer_type", NO_ROLE, "training.optimizer_type: expected an optimizer class (a subclass of "
                                         f"torch.optim.Optimizer), got {NO_ROLE}"),
    ("training.scheduler_type", NO_ROLE, "training.scheduler_type: expected a scheduler class (a subclass of "
                                         f"torch.optim.lr_scheduler.LRScheduler or ReduceLROnPlateau), got {NO_ROLE}"),
    ("criterion", NO_ROLE, f"criterion: expected {LOSS}, got {NO_ROLE} (a class that is not a torch.nn.Module)"),
    ("criterion", "!pyobject subprocess.run",
     f"criterion: expected {LOSS}, got !pyobject subprocess.run (a function of the standard library)"),
    ("callbacks", f"[{{type: {NO_ROLE}}}]", "callbacks: item 0: expected {type: !pyobject module.CallbackClass, "
                                            "kwargs: {...}} whose type is a callback class (a subclass of "
                                            f"QuantumGrav.Callback), got {NO_ROLE}"),
]


@pytest.mark.parametrize("key, value, line", SIBLINGS,
                         ids=[f"{k}={v.split('.')[-1].strip('}]')}" for k, v, _ in SIBLINGS])
def test_a_value_outside_its_keys_role_exits_2_with_one_line_and_nothing_is_called(tmp_path, tiny_config,
                                                                                   cli_in_process, key, value, line):
    (tmp_path / "tiny.yaml").write_text(dump_config(tiny_config({"training.num_epochs": 1})))
    (tmp_path / "bad.yaml").write_text(_section_yaml(key, value))
    result = cli_in_process("train", "--config", "tiny.yaml", "--merge", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: invalid config (1 problem):\n  - {line}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "tiny.yaml"]  # no EVIDENCE, no run


def test_generate_refuses_the_issues_config_too(tmp_path, cli_in_process):
    (tmp_path / "it.yaml").write_text(ISSUE_YAML)
    result = cli_in_process("generate", "--config", "it.yaml", cwd=tmp_path)
    assert result.returncode == 2 and f"data.type: expected {DATASET}, got !pyobject subprocess.run" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it.yaml"]


def test_a_run_directorys_tampered_configs_are_refused_on_resume_before_anything_runs(tmp_path, tiny_config,
                                                                                      cli_in_process):
    (tmp_path / "tiny.yaml").write_text(dump_config(tiny_config({"training.num_epochs": 1,
                                                                 "training.run_name": "shared"})))
    assert cli_in_process("train", "--config", "tiny.yaml", cwd=tmp_path).returncode == 0
    run = tmp_path / "runs" / "shared"
    tampered = load_yaml_text((run / "config.yaml").read_text())
    tampered["data"]["type"], tampered["data"]["kwargs"] = leave_evidence, {}
    # A run directory from someone else: its config.yaml and the config inside its checkpoint name a function.
    (run / "config.yaml").write_text(dump_config(tampered))
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    torch.save({**state, "config_yaml": dump_config(tampered)}, run / "checkpoints" / "last.pt")
    files = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    line = f"  - data.type: expected {DATASET}, got !pyobject role_helpers.leave_evidence\n"

    own_config = cli_in_process("train", "--config", "runs/shared/config.yaml", "--resume", "runs/shared", cwd=tmp_path)
    assert own_config.returncode == 2 and line in own_config.stderr
    # With a config of one's own, the config stored in the checkpoint is read (and refused) on resume.
    checkpoint = cli_in_process("train", "--config", "tiny.yaml", "--resume", "runs/shared",
                                "--set", "training.num_epochs=2", cwd=tmp_path)
    assert checkpoint.returncode == 2 and line in checkpoint.stderr, checkpoint.stderr
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == files  # no EVIDENCE


@pytest.mark.parametrize("door", ["load_config", "Trainer", "launch"])
def test_every_door_that_takes_a_raw_config_checks_the_roles(tmp_path, monkeypatch, door):
    monkeypatch.chdir(tmp_path)
    config = {"training": {"path": str(tmp_path / "runs")}, "data": {"type": leave_evidence}}
    open_door = {"load_config": QG.load_config, "Trainer": QG.Trainer,
                 "launch": lambda c: QG.launch(c, nproc=2)}[door]
    with pytest.raises(QG.ConfigError, match=r"data.type: expected a dataset class .*, got !pyobject "
                                             r"role_helpers.leave_evidence$"):
        open_door(config)
    assert not (tmp_path / EVIDENCE).exists() and not (tmp_path / "runs").exists()


# Positional arguments of a constructor of the right role: the library passes them on and never calls them
# (a class of the right role can call what its arguments name; the trust note in the docs says so).
ARGUMENT_LISTS = ["training.optimizer_args", "training.optimizer_args", "training.scheduler_args",
                  "training.scheduler_args"]


def test_every_pyobject_key_of_the_schema_has_a_role():
    """No key takes subprocess.run, alone or in a list: a new `!pyobject` key checked only for being
    importable fails here."""
    def fields(spec, prefix=""):
        for key, item in spec.items():
            yield from fields(item, f"{prefix}{key}.") if isinstance(item, dict) else [(f"{prefix}{key}", item)]

    accepting = []
    for key, field in fields(schema()):
        for value in (subprocess.run, [subprocess.run], [{"type": subprocess.run}]):
            try:
                field.validate(value)
                accepting.append(key)
            except Invalid:
                pass
    assert accepting == ARGUMENT_LISTS


ACCEPTED = [
    ("data.type", "QuantumGrav.data.zarr_store.QuantumGravJLDataset"),
    ("data.type", "my_causal_sets.MyCausalSets"),
    ("data.type", "own_data_helpers.SetsWithoutY"),  # a torch.utils.data.Dataset
    ("data.type", "role_helpers.causal_sets_from_a_function"),
    ("model.type", "my_causal_sets.GraphAndInvariantsGNN"),
    ("model.conv", "torch_geometric.nn.GINConv"),
    ("training.optimizer_type", "torch.optim.SGD"),
    ("training.scheduler_type", "torch.optim.lr_scheduler.ReduceLROnPlateau"),
    ("training.scheduler_type", "torch.optim.lr_scheduler.LambdaLR"),
    ("criterion", "torch.nn.functional.mse_loss"),
    ("criterion", "torch.nn.CrossEntropyLoss"),
    ("criterion", "ddp_helpers.loss_failing_on_rank_1"),
    ("criterion", "slow_losses.cross_entropy_slowly"),  # notebook 06's, next to the notebook
]


@pytest.mark.parametrize("key, path", ACCEPTED, ids=[f"{k}={p}" for k, p in ACCEPTED])
def test_values_of_their_keys_role_are_accepted(monkeypatch, key, path):
    from conftest import REPO

    monkeypatch.syspath_prepend(str(REPO / "notebooks"))
    config = QG.load_config(None, {key: f"!pyobject {path}"})
    section, _, leaf = key.partition(".")
    assert (config[section][leaf] if leaf else config[key]) is resolve_pyobject(path)


@pytest.mark.parametrize("path", ["subprocess.run", "os.system", "builtins.eval", "shutil.rmtree", "pickle.loads"])
def test_functions_of_the_standard_library_are_not_losses(path):
    with pytest.raises(QG.ConfigError, match=r"criterion: expected a loss .*, got !pyobject \S+ \(a function of the "
                                             r"standard library\)$"):
        QG.load_config(None, {"criterion": f"!pyobject {path}"})


def test_a_function_of_an_installed_package_is_a_loss_only_when_marked(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "installed_losses.py").write_text(
        "import QuantumGrav as QG\nimport torch.nn.functional as F\n\n\n"
        "def plain(logits, target):\n    return F.cross_entropy(logits, target)\n\n\n"
        "@QG.loss_function\ndef marked(logits, target):\n    return F.cross_entropy(logits, target)\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(QG.ConfigError, match=r"got !pyobject installed_losses.plain \(a function of the installed "
                                             r"package installed_losses\)$"):
        QG.load_config(None, {"criterion": "!pyobject installed_losses.plain"})
    marked = QG.load_config(None, {"criterion": "!pyobject installed_losses.marked"})["criterion"]
    assert marked.__name__ == "marked"
    # The same file outside an installation is the user's own code: no mark needed.
    (tmp_path / "own_losses.py").write_text((site / "installed_losses.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    assert QG.load_config(None, {"criterion": "!pyobject own_losses.plain"})["criterion"].__name__ == "plain"


def test_the_defining_module_counts_not_the_path_named(tmp_path, monkeypatch):
    (tmp_path / "reexports.py").write_text("from subprocess import run\n")  # a module of one's own
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(QG.ConfigError, match=r"got !pyobject subprocess.run \(a function of the standard library\)"):
        QG.load_config(None, {"criterion": "!pyobject reexports.run"})


def test_functions_of_a_script_or_notebook_are_own_code():
    def loss(logits, target):
        return logits.sum()

    loss.__module__ = "__main__"  # as a function defined in a notebook cell or a script
    assert function_origin(loss) == ""


def test_a_marked_dataset_factory_trains_end_to_end(tiny_config):
    config = tiny_config({"data.type": causal_sets_from_a_function, "data.kwargs": {"num_sets": 30},
                          "training.num_epochs": 1})
    trainer = QG.Trainer(yaml.load(dump_config(config), QG.get_loader()))  # as a run's config.yaml names it
    try:
        trainer.run_training(*trainer.prepare_dataloaders()[:2])
        assert len(trainer.dataset) == 30 and [row["epoch"] for row in trainer.history] == [0]
    finally:
        trainer.close()


def test_an_unmarked_function_is_not_a_dataset():
    with pytest.raises(QG.ConfigError, match=r"data.type: expected a dataset class .*, got !pyobject "
                                             r"own_data_helpers.small_sets$"):
        QG.load_config(None, {"data.type": "!pyobject own_data_helpers.small_sets"})


@pytest.mark.parametrize("decorator", [QG.dataset_factory, QG.loss_function])
def test_the_marks_take_functions_only(decorator):
    with pytest.raises(TypeError, match="marks a function"):
        decorator(torch.nn.MSELoss)
