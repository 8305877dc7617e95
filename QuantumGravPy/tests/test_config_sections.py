"""The typed config sections: the shipped configs and a run directory's config.yaml resolve as the release
before the sections did (tests/config_compat/resolved/*.yaml), and each section reads its YAML keys."""

import dataclasses
import pickle
from pathlib import Path

import pytest

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import dump_config, load_yaml_text
from QuantumGrav.config.layout import schema
from QuantumGrav.config.sections.base import FrozenDict, setting_key, settings
from QuantumGrav.config.layout import TOP_LEVEL_KEYS, ConfigSections, config_sections

from ddp_helpers import ValError

REPO = Path(__file__).resolve().parents[2]
COMPAT = Path(__file__).parent / "config_compat"
SOURCES = {**{path.stem: [path] for path in sorted((REPO / "configs").glob("*.yaml")) if path.name != "tune.yaml"},
           "every_section": [COMPAT / "every_section.yaml"],
           "train_ddp+wandb_ddp": [REPO / "configs" / "train_ddp.yaml", REPO / "configs" / "logger" / "wandb_ddp.yaml"],
           "run_dir": [COMPAT / "run_dir" / "config.yaml"]}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_configs_and_a_run_directorys_config_resolve_as_before(name, monkeypatch):
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST", raising=False)
    expected = load_yaml_text((COMPAT / "resolved" / f"{name}.yaml").read_text())
    resolved = QG.load_config(SOURCES[name])
    assert dict(resolved) == expected
    assert load_yaml_text(dump_config(resolved)) == expected, "what a run writes as config.yaml reads back the same"


def test_every_shipped_config_is_pinned():
    assert {path.stem for path in (REPO / "configs").glob("*.yaml") if path.name != "tune.yaml"} <= set(SOURCES)


def test_the_sections_read_every_key_of_the_layout_once():
    keys = [key for key, _ in settings(ConfigSections)]
    assert len(keys) == len(set(keys))
    assert set(schema()) == set(TOP_LEVEL_KEYS) == {key.split(".")[0] for key in keys}


def test_the_sections_hold_the_resolved_values_frozen(monkeypatch):
    monkeypatch.delenv("QUANTUMGRAV_SMOKE_TEST", raising=False)
    config = QG.load_config(COMPAT / "every_section.yaml")
    sections = config.sections
    assert sections is config.sections and isinstance(sections, ConfigSections)
    assert sections.optimizer.lr == 0.01 and sections.optimizer.type is config["training"]["optimizer_type"]
    assert sections.loaders.training.batch_budget.nodes == 4000 and sections.loaders.validation.mode == "rank0"
    assert sections.checkpoint.every_n_steps == 100 and sections.task.criterion is config["criterion"]
    assert sections.model.hidden_channels == (16, 16) and sections.wandb.watch.enabled is True
    assert sections.callbacks[0]["type"] is ValError
    with pytest.raises(dataclasses.FrozenInstanceError):
        sections.loop.num_epochs = 5
    with pytest.raises(TypeError, match="frozen"):
        sections.optimizer.kwargs["lr"] = 1.0
    config["training"]["num_epochs"] = 7  # an edit of the dict does not reach the validated sections
    assert sections.loop.num_epochs == 3
    assert pickle.loads(pickle.dumps(config)).sections == sections


def test_absent_optional_sections_are_none_and_defaults_are_the_dataclasses():
    sections = QG.load_config(None).sections
    assert sections.wandb is None and sections.loaders.training.batch_budget is None
    assert sections == config_sections(QG.load_config(None))
    assert sections.model == type(sections.model)(), "a section's dataclass defaults are the config's defaults"


def test_each_setting_names_the_yaml_key_it_reads():
    section_of = {key: (cls, item) for cls in (type(QG.load_config(None).sections.optimizer),)
                  for item in dataclasses.fields(cls) for key in [setting_key(cls, item)]}
    assert set(section_of) == {"training.optimizer_type", "training.optimizer_args", "training.optimizer_kwargs",
                               "training.lr_scaling", "training.reference_batch_size"}
    assert isinstance(QG.load_config(None).sections.optimizer.kwargs, FrozenDict)


def test_build_model_takes_the_model_section_as_it_takes_the_dict():
    config = QG.load_config(None)
    from_section, from_dict = QG.build_model(config.sections.model, 10, 5), QG.build_model(config["model"], 10, 5)
    assert str(from_section) == str(from_dict)
    assert {k: v.shape for k, v in from_section.state_dict().items()} == \
        {k: v.shape for k, v in from_dict.state_dict().items()}
