"""The search space of a study (``tune.space``): what a trial samples, turned into config overrides.

Each entry maps a config key path (the paths of ``--set``) to a distribution::

    tune:
      space:
        training.optimizer_kwargs.lr: {low: 1.0e-4, high: 1.0e-2, log: true}   # float (a bound is a float)
        model.dropout: {low: 0.0, high: 0.3}                                   # float
        training.num_epochs: {low: 10, high: 40, step: 10}                      # int (both bounds integers)
        model.conv: {choices: [!pyobject torch_geometric.nn.GraphConv, !pyobject torch_geometric.nn.GINConv]}
        width_and_batch:            # coupled: a name (not a key path) whose choices each set several keys
          choices:
            - {model.hidden_channels: [32, 32], training.batch_size: 16}
            - {model.hidden_channels: [64, 64, 64], training.batch_size: 32}

Choices may be any YAML values (lists, mappings, ``!pyobject`` classes). Optuna stores a categorical
parameter as a number, string, bool or null, so other choices are stored under a short label
(``GINConv``, ``[32, 32]``, ``hidden_channels=[32, 32], batch_size=16``); trials.csv and the figures
show those labels, best.yaml the values.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from collections.abc import Iterator, Mapping
from typing import Any

from ..config.checks import Field, mapping
from ..config.yaml_io import pyobject_path
from ..config.layout import schema

NUMERIC_KEYS = {"low", "high", "log", "step"}
PRIMITIVE = (type(None), bool, int, float, str)


@dataclass(frozen=True)
class Dimension:
    """One parameter of the study: a number in a range, or one of several choices.

    ``name`` is the Optuna parameter's name (the key path, or a coupled entry's name); a categorical
    dimension keeps, for each choice, its label (what Optuna stores) and its overrides (key path -> value).
    """

    name: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    labels: tuple[Any, ...] = ()
    choices: tuple[dict[str, Any], ...] = ()

    @property
    def categorical(self) -> bool:
        return bool(self.choices)

    @property
    def integer(self) -> bool:
        return not self.categorical and isinstance(self.low, int) and isinstance(self.high, int)

    def suggest(self, trial) -> dict[str, Any]:
        """Sample this dimension in an Optuna trial; the overrides it gives."""
        if self.categorical:
            return self.overrides(trial.suggest_categorical(self.name, list(self.labels)))
        if self.integer:
            return self.overrides(trial.suggest_int(self.name, self.low, self.high, step=self.step or 1, log=self.log))
        return self.overrides(trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log))

    def overrides(self, param: Any) -> dict[str, Any]:
        """The config overrides of a stored parameter value (a label for a categorical dimension)."""
        if self.categorical:
            return dict(self.choices[self.labels.index(param)])
        return {self.name: param}

    def candidates(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(what, overrides) for every choice and both bounds: each must give a valid config."""
        if self.categorical:
            for label, overrides in zip(self.labels, self.choices):
                yield f"choice {label!r}", overrides
        else:
            yield f"low {self.low!r}", {self.name: self.low}
            yield f"high {self.high!r}", {self.name: self.high}

    def describe(self) -> dict[str, Any]:
        """A plain description (stored with the study: a restarted worker must sample the same space)."""
        if self.categorical:
            return {"choices": [label if isinstance(label, PRIMITIVE) else str(label) for label in self.labels]}
        return {"low": self.low, "high": self.high, "log": self.log, "step": self.step}


class SearchSpace:
    """The dimensions of ``tune.space``, checked; ``problems`` lists what is wrong, one line each."""

    def __init__(self, space: Mapping[str, Any]):
        self.dimensions: list[Dimension] = []
        self.problems: list[str] = []
        if not space:
            self.problems.append("tune.space: expected at least one key path to search over, e.g. "
                                 "training.optimizer_kwargs.lr: {low: 1.0e-4, high: 1.0e-2, log: true}")
        seen: dict[str, str] = {}
        for name, entry in space.items():
            dimension = self._parse(str(name), entry)
            if dimension is None:
                continue
            for path in _paths_of(dimension):
                if path in seen:
                    self.problems.append(f"tune.space.{name}: sets {path}, which tune.space.{seen[path]} sets too; "
                                         "each key path may be searched by one entry")
                seen[path] = name
            self.dimensions.append(dimension)

    def suggest(self, trial) -> dict[str, Any]:
        overrides: dict[str, Any] = {}
        for dimension in self.dimensions:
            overrides.update(dimension.suggest(trial))
        return overrides

    def overrides(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The overrides of a finished trial's stored parameters."""
        found: dict[str, Any] = {}
        for dimension in self.dimensions:
            if dimension.name in params:
                found.update(dimension.overrides(params[dimension.name]))
        return found

    def describe(self) -> dict[str, Any]:
        return {d.name: d.describe() for d in self.dimensions}

    def _problem(self, name: str, text: str) -> None:
        self.problems.append(f"tune.space.{name}: {text}")

    def _parse(self, name: str, entry: Any) -> Dimension | None:
        if not isinstance(entry, dict):
            self._problem(name, f"expected a distribution, {{low, high}} or {{choices: [...]}}, got {entry!r}")
            return None
        if "choices" in entry:
            return self._parse_choices(name, entry)
        return self._parse_range(name, entry)

    def _parse_range(self, name: str, entry: dict) -> Dimension | None:
        unknown = sorted(set(entry) - NUMERIC_KEYS)
        problem = key_path_problem(name)
        if unknown or problem or not {"low", "high"} <= set(entry):
            self._problem(name, problem or f"expected {{low, high}} with optional log and step (or {{choices: "
                                           f"[...]}}), got keys {sorted(entry)}")
            return None
        low, high, log, step = entry["low"], entry["high"], entry.get("log", False), entry.get("step")
        numbers = [v for v in (low, high, step) if v is not None]
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) for v in numbers):
            self._problem(name, f"low, high and step must be numbers, got low={low!r} high={high!r} step={step!r}")
            return None
        if not isinstance(log, bool):
            self._problem(name, f"log: expected true or false, got {log!r}")
            return None
        if not (isinstance(low, int) and isinstance(high, int) and not isinstance(step, float)):
            low, high = float(low), float(high)  # a float range (integer bounds and step: an int range)
        return self._checked_range(name, Dimension(name, low, high, log, step))

    def _checked_range(self, name: str, dimension: Dimension) -> Dimension | None:
        low, high, step = dimension.low, dimension.high, dimension.step
        kind = "int" if dimension.integer else "float"
        if high < low:
            self._problem(name, f"empty range: low {low} > high {high}")
        elif dimension.log and low <= 0:
            self._problem(name, f"log: true needs low > 0 (a log scale has no 0 or negative values), got low {low}")
        elif dimension.log and step is not None and not (dimension.integer and step == 1):  # as Optuna allows
            self._problem(name, f"log and step cannot be combined ({kind} range with log: true takes no step)")
        elif step is not None and step <= 0:
            self._problem(name, f"step: expected a number > 0, got {step}")
        elif step is not None and abs((high - low) / step - round((high - low) / step)) > 1e-9:
            self._problem(name, f"high - low ({high - low}) must be a multiple of step ({step})")
        else:
            return dimension
        return None

    def _parse_choices(self, name: str, entry: dict) -> Dimension | None:
        choices = entry["choices"]
        if set(entry) != {"choices"} or not isinstance(choices, list) or not choices:
            self._problem(name, f"expected {{choices: [value, ...]}} with at least one value, got {entry!r}")
            return None
        problem = key_path_problem(name)
        coupled = problem is not None and "." not in name and all(isinstance(c, dict) and c for c in choices)
        if problem is not None and not coupled:
            hint = "" if "." in name else " (or, for coupled choices, a name whose choices map key paths to values)"
            self._problem(name, problem + hint)
            return None
        overrides = self._coupled(name, choices) if coupled else tuple({name: choice} for choice in choices)
        if overrides is None:
            return None
        labels = _labels(choices, coupled)
        if len(set(map(_identity, labels))) < len(labels):
            self._problem(name, f"a choice is given twice: {[str(label) for label in labels]}")
            return None
        return Dimension(name, labels=tuple(labels), choices=overrides)

    def _coupled(self, name: str, choices: list[dict]) -> tuple[dict[str, Any], ...] | None:
        keys = list(choices[0])
        problems = [f"{path}: {key_path_problem(path)}" for path in keys if key_path_problem(path)]
        problems += [f"choice {i} sets {sorted(c)}, choice 0 sets {sorted(keys)}; every choice sets the same keys"
                     for i, c in enumerate(choices) if set(c) != set(keys)]
        for problem in problems:
            self._problem(name, problem)
        return None if problems else tuple(dict(c) for c in choices)


def _paths_of(dimension: Dimension) -> list[str]:
    return list(dimension.choices[0]) if dimension.categorical else [dimension.name]


def _identity(label: Any) -> tuple[type, Any]:
    return type(label), label


def _labels(choices: list[Any], coupled: bool) -> list[Any]:
    """What Optuna stores for each choice: the value itself when every choice is a plain number, string,
    bool or null; otherwise a short text label."""
    if not coupled and all(isinstance(c, PRIMITIVE) for c in choices):
        return list(choices)
    if coupled:
        return [", ".join(f"{path.rsplit('.', 1)[-1]}={short_text(v)}" for path, v in c.items()) for c in choices]
    labels = [short_text(c) for c in choices]
    if len(set(labels)) < len(labels):  # two classes of the same name from different modules
        labels = [short_text(c, qualified=True) for c in choices]
    return labels


def short_text(value: Any, qualified: bool = False) -> str:
    """A one-line text of a config value: classes by name, lists and mappings in YAML's flow style."""
    if callable(value) and hasattr(value, "__qualname__"):
        return pyobject_path(value) if qualified else value.__qualname__
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(short_text(v, qualified) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {short_text(v, qualified)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def key_path_problem(path: str) -> str | None:
    """None when ``path`` names a value of the training config (keys below a free-form mapping such as
    ``training.optimizer_kwargs`` or ``model.conv_kwargs`` included); else what is wrong with it."""
    node: Any = schema()
    parts = path.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, Field):
            if node.check is mapping:
                return None
            return f"'{'.'.join(parts[:i])}' is a value, not a section: '{path}' names nothing"
        if part not in node:
            known = list(node)
            hint = difflib.get_close_matches(part, known, n=1)
            where = ".".join(parts[:i]) or "the config"
            suggestion = f"did you mean '{'.'.join([*parts[:i], hint[0]])}'?" if hint else \
                f"the keys of {where} are {', '.join(known)}"
            return f"unknown key '{'.'.join(parts[:i + 1])}'; {suggestion}"
        node = node[part]
    if isinstance(node, dict):
        return f"'{path}' is a section; name one of its keys ({', '.join(node)})"
    return None
