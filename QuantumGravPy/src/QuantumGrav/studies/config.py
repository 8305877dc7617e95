"""A study's config: a training config plus a ``tune:`` section, read and checked once, before any trial.

``read_study_config`` splits the ``tune`` section off and checks it here: its keys, the search space
against the training config's schema, every choice and both bounds of every range against the base
config, the metric against the task, the sampler and the pruner. The rest is the base training config,
validated by ``load_config`` like any other. All problems come in one ConfigError, one line each, and
nothing has been written when it is raised (the storage is opened only afterwards, see ``storage``).

Why ``tune`` is not a section of the training schema: a trial's config.yaml and the study's best.yaml
are then plain training configs, which ``python -m QuantumGrav train`` accepts as they are.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, ClassVar

from ..config.checks import Invalid, integer, mapping, plain_name, string
from ..config.schema import load_config, validate_config
from ..config.sections.base import PyObjectName, Section, setting, thaw
from ..config.validation import validate_section
from ..config.yaml_io import (UnresolvedPyObject, apply_overrides, merge_configs, read_config_file,
                              resolve_pyobject)
from ..common.errors import ConfigError, UserError
from .search_space import SearchSpace
from ..config.smoke_test import cap_file_epochs, cap_file_trials
from ..config.sections.task import early_stopping_metric
from ..tasks.registry import TASKS, metric_mode

OPTUNA_EXTRA = "pip install 'QuantumGrav[tune]'"


def require_optuna() -> None:
    """The tuner needs Optuna, an optional dependency: say how to get it, as bad input (exit 2)."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise UserError(f"the tuner needs Optuna, which is not installed; install it with {OPTUNA_EXTRA}") from None


@dataclass
class StudySettings:
    """The checked ``tune`` section, with what follows from it (folder, storage, metric, direction)."""

    study: str
    folder: Path
    storage: str  # an Optuna RDB URL, or the path of a journal file
    trials: int
    metric: str
    direction: str  # "minimize" or "maximize", as the metric improves
    sampler_type: type
    sampler_kwargs: dict[str, Any]
    pruner_type: type
    pruner_kwargs: dict[str, Any]
    seed: int | None
    space: SearchSpace

    def sampler(self, trial_number: int = 0):
        """The sampler; with ``tune.seed``, seeded per trial (``seed + trial number``): a study of one worker
        samples the same trials every time, and two workers never draw the same random numbers."""
        seeded = {"seed": self.seed + trial_number} if self.seed is not None else {}
        return self.sampler_type(**self.sampler_kwargs, **seeded)

    def pruner(self):
        return self.pruner_type(**self.pruner_kwargs)


def _optuna_class(base_path: str, role: str):
    """A field check: an Optuna class of ``role`` (checked before anything is called)."""

    def check(value: Any) -> type:
        base = resolve_pyobject(base_path)
        if isinstance(value, UnresolvedPyObject):
            raise Invalid(f"expected {role} given as !pyobject; '{value.path}' does not import: {value.reason}",
                           names_value=True)
        if not (isinstance(value, type) and issubclass(value, base)):
            raise Invalid(f"expected {role} (a subclass of {base_path}) given as !pyobject")
        return value

    return check


@dataclass(frozen=True)
class TuneSection(Section):
    """``tune:``, a study config's own section (docs/hyperparameter_search.md describes it)."""

    yaml: ClassVar[str] = "tune"

    study: str = setting("study", plain_name, "the study's name; its folder is <path>/<study>")
    path: str = setting("studies", string, "parent folder of the study folders")
    storage: str | None = setting(None, string, "null: a journal file in the study folder; else an Optuna storage "
                                  "URL (sqlite:///..., postgresql://...) or the path of a journal file", nullable=True)
    trials: int = setting(20, integer(1), "finished trials (COMPLETE or PRUNED) the study ends with")
    metric: str | None = setting(None, early_stopping_metric,
                                 "null: early_stopping.metric; the direction follows the metric", nullable=True)
    sampler_type: type = setting(PyObjectName("optuna.samplers.TPESampler"),
                                 _optuna_class("optuna.samplers.BaseSampler", "an Optuna sampler class"),
                                 "the sampler that proposes each trial's values")
    sampler_kwargs: Mapping[str, Any] = setting({}, mapping, "keyword arguments of the sampler (not seed: tune.seed)")
    pruner_type: type = setting(PyObjectName("optuna.pruners.MedianPruner"),
                                _optuna_class("optuna.pruners.BasePruner", "an Optuna pruner class"),
                                "the pruner that stops unpromising trials early, from their validation metric")
    pruner_kwargs: Mapping[str, Any] = setting({}, mapping, "keyword arguments of the pruner")
    seed: int | None = setting(None, integer(0), "seeds the sampler (per trial: seed + trial number)", nullable=True)
    space: Mapping[str, Any] = setting({}, mapping, "key path -> {low, high, log, step} or {choices: [...]}")


def read_study_config(source: str | Path | Mapping[str, Any] | list | tuple,
                      overrides: list[str] | Mapping[str, Any] | None = None,
                      trials: int | None = None) -> tuple[StudySettings, dict[str, Any]]:
    """(the checked tune section, the validated base training config) of a study config; ConfigError
    listing every problem, one line each."""
    require_optuna()
    raw = apply_overrides(_read_raw(source), overrides)
    if trials is not None:
        raw = apply_overrides(raw, {"tune.trials": trials})
    if "tune" not in raw:
        raise ConfigError("tune: missing; a study config is a training config plus a tune: section "
                          "(see configs/tune.yaml)")
    problems: list[str] = []
    tune = validate_section(TuneSection, raw.pop("tune"), problems)
    base = None
    try:
        base = load_config(raw)
    except ConfigError as err:
        problems += problem_lines(err)
    settings = None
    if tune is not None and base is not None:
        settings = _settings(tune, base)
        problems += settings.space.problems + _candidate_problems(settings.space, base)
        problems += _metric_problems(settings, base) + _sampler_problems(settings)
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid study config ({len(problems)} problem{'s' * (len(problems) > 1)}):\n{listing}")
    return settings, base


def _read_raw(source: Any) -> dict[str, Any]:
    """The unvalidated config of a path, a dict or a list of them (merged in order), as load_config reads them."""
    raw: dict[str, Any] = {}
    for item in source if isinstance(source, (list, tuple)) else [source]:
        if isinstance(item, Mapping):
            raw = merge_configs(raw, item)
            continue
        read = read_config_file(item)
        if not isinstance(read, dict):
            raise ConfigError(f"{item}: expected a mapping of sections at the top level")
        raw = merge_configs(raw, cap_file_trials(cap_file_epochs(read)))
    return raw


def problem_lines(err: ConfigError) -> list[str]:
    """The one-line problems of a ConfigError (its listing, or its message when it has none)."""
    lines = [line[4:] for line in str(err).splitlines() if line.startswith("  - ")]
    return lines or [" ".join(str(err).split())]


def _settings(tune: TuneSection, base: dict[str, Any]) -> StudySettings:
    folder = Path(tune.path).expanduser().resolve() / tune.study
    storage = tune.storage
    if storage is None:
        storage = str(folder / "study.journal")
    elif "://" not in storage:
        storage = str(Path(storage).expanduser().resolve())
    metric = tune.metric or base["early_stopping"]["metric"]
    # The plain lists and dicts the YAML gave: the space's values go into trials' configs, the kwargs to Optuna.
    return StudySettings(tune.study, folder, storage, tune.trials, metric,
                         "maximize" if metric_mode(metric) == "max" else "minimize",
                         tune.sampler_type, thaw(tune.sampler_kwargs), tune.pruner_type, thaw(tune.pruner_kwargs),
                         tune.seed, SearchSpace(thaw(tune.space)))


def _candidate_problems(space: SearchSpace, base: dict[str, Any]) -> list[str]:
    """Every choice and both bounds of every range, each alone on the base config, must give a valid config."""
    problems = []
    for dimension in space.dimensions:
        for what, overrides in dimension.candidates():
            try:
                validate_config(apply_overrides(base, overrides))
            except ConfigError as err:
                problems.append(f"tune.space.{dimension.name}: {what} gives an invalid config: "
                                f"{'; '.join(problem_lines(err))}")
    return problems


def task_of(config: dict[str, Any]) -> str | None:
    """The task a config trains, when the config alone says it (not for a dataset class of one's own
    with ``task.type: auto``: its data decide)."""
    from ..data.dataset import TARGET_TASKS

    if config["task"]["type"] != "auto":
        return config["task"]["type"]
    return TARGET_TASKS[config["data"]["target"]] if config["data"]["type"] is None else None


def _metric_problems(settings: StudySettings, base: dict[str, Any]) -> list[str]:
    task = task_of(base)
    reported = [f"val_{m}" for m in (TASKS[task].reports if task in TASKS else ())]
    if task is None or settings.metric in reported:
        return []
    which = "tune.metric" if settings.metric != base["early_stopping"]["metric"] else \
        "tune.metric (null: early_stopping.metric)"
    return [(f"{which}: {settings.metric} is not reported by the {task} task of this config; expected one of "
             f"{', '.join(reported)}")]


def _sampler_problems(settings: StudySettings) -> list[str]:
    """The sampler and the pruner are built once now, so that arguments they reject are config errors."""
    problems = []
    takes_seed = "seed" in inspect.signature(settings.sampler_type).parameters
    if settings.seed is not None and "seed" in settings.sampler_kwargs:
        problems.append("tune.sampler_kwargs.seed: set tune.seed instead (each trial is sampled with seed + its "
                        "number)")
    elif settings.seed is not None and not takes_seed:
        problems.append(f"tune.seed: {settings.sampler_type.__name__} takes no seed; set tune.seed: null")
    if problems:
        return problems
    for key, what, build in (("tune.sampler_kwargs", "sampler", settings.sampler),
                             ("tune.pruner_kwargs", "pruner", settings.pruner)):
        try:
            build()
        except (TypeError, ValueError) as err:
            problems.append(f"{key}: the {what} {getattr(settings, what + '_type').__name__} rejects them: {err}")
    return problems
