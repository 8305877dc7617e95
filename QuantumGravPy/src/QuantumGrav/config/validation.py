"""Validation of a config against its sections' YAML layout: every problem at once, each naming its key path.
Each key is checked on its own first; the checks that combine several keys run once every key is valid."""

from __future__ import annotations

import copy
import difflib
from typing import Any, Mapping

from ..common.errors import ConfigError
from .checks import _describe, Invalid, number
from .sections.data import MANIFOLD_CLASSES
from ..tasks.registry import metric_mode
from .sections.base import Section, lookup, section_from, yaml_tree
from .layout import OPTIONAL_SECTIONS, schema

DERIVED_SECTION = "derived"  # absent (or null) means: feature off
STUDY_SECTION = "tune"  # a study config's own section (studies/config.py), which a training config does not have


def _walk(spec: Mapping[str, Any], given: Any, prefix: str, errors: list[str]) -> dict:
    if not isinstance(given, dict):
        errors.append(f"{prefix.rstrip('.') or 'config'}: expected a mapping (section), got {_describe(given)}")
        return {}
    for key in given:
        if key not in spec:
            hint = difflib.get_close_matches(str(key), list(spec), n=1)
            suggestion = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(spec)}"
            if f"{prefix}{key}" == STUDY_SECTION:  # a study config given to train
                suggestion = ("; this is a study config: run it with python -m QuantumGrav tune --config ... (or "
                              "QG.tune), or train one of its configurations (the study's best.yaml)")
            errors.append(f"{prefix}{key}: unknown key{suggestion}")
    resolved: dict[str, Any] = {}
    for key, item in spec.items():
        path = f"{prefix}{key}"
        if isinstance(item, dict):
            if path in OPTIONAL_SECTIONS and given.get(key) is None:
                resolved[key] = None
                continue
            resolved[key] = _walk(item, given.get(key, {}), path + ".", errors)
        elif key in given:
            try:
                resolved[key] = item.validate(given[key])
            except Invalid as err:
                got = "" if err.names_value else f", got {_describe(given[key])}"
                errors.append(f"{path}: {err}{got}")
        else:
            resolved[key] = copy.deepcopy(item.default)
    return resolved


def validate_section(cls: type[Section], given: Any, errors: list[str]) -> Section | None:
    """A section outside the training config's layout (``cls.yaml`` names it, e.g. a study's ``tune``), checked
    as the config's are: each problem appended to ``errors`` with its key path. Returns the typed, frozen section,
    or None when it has problems."""
    found = len(errors)
    resolved = _walk(lookup(yaml_tree(cls), cls.yaml), given, cls.yaml + ".", errors)
    if len(errors) > found:
        return None
    nested: dict[str, Any] = resolved
    for part in reversed(cls.yaml.split(".")):
        nested = {part: nested}
    return section_from(cls, nested)


def _cross_checks(cfg: dict, errors: list[str]) -> None:
    """Checks that involve several keys (run once every key on its own is valid)."""
    _data_checks(cfg["data"], errors)
    _training_checks(cfg, errors)


def _data_checks(data: dict, errors: list[str]) -> None:
    if data["n_min"] > data["n_max"]:
        errors.append(f"data.n_min: expected n_min <= n_max, got n_min={data['n_min']} > n_max={data['n_max']}")
    if abs(sum(data["split"]) - 1.0) > 1e-6:
        errors.append(f"data.split: expected three fractions that sum to 1, got {data['split']} "
                      f"(sum {sum(data['split']):.3f})")
    for cls in data["classes"]:
        if cls in MANIFOLD_CLASSES and MANIFOLD_CLASSES[cls] not in data["dimensions"]:
            errors.append(f"data.classes: '{cls}' needs dimension {MANIFOLD_CLASSES[cls]} in data.dimensions, "
                          f"got dimensions {data['dimensions']}; add it there or remove the class")


def _training_checks(cfg: dict, errors: list[str]) -> None:
    es = cfg["early_stopping"]
    if es["mode"] is not None and es["mode"] != metric_mode(es["metric"]):
        # Always a mistake, often made by overriding the metric of an already resolved config.
        errors.append(f"early_stopping.mode: '{es['mode']}' but {es['metric']} improves towards "
                      f"'{metric_mode(es['metric'])}'; set mode to null (it then follows the metric)")
    budget = cfg["training"]["batch_budget"]
    if budget is not None and budget["nodes"] is None and budget["edges"] is None:
        errors.append(f"training.batch_budget: expected nodes, edges or both (a bound on the batch's size), got "
                      f"{budget}; for a fixed number of graphs per batch use training.batch_size instead")
    if budget is not None and cfg["training"]["lr_scaling"] != "none":
        errors.append(f"training.lr_scaling: '{cfg['training']['lr_scaling']}' scales the LR with the effective batch "
                      "size, which training.batch_budget does not fix (its batches hold different numbers of "
                      "graphs); set lr_scaling: none and the LR for the budget")
    if budget is not None and cfg["training"]["drop_last"]:
        errors.append("training.drop_last: batches packed by training.batch_budget have no incomplete last batch "
                      "to drop; set drop_last: false")
    lr = cfg["training"]["optimizer_kwargs"].get("lr")
    if lr is not None:
        try:
            number(0.0, exclusive_min=True)(lr)
        except Invalid as err:
            errors.append(f"training.optimizer_kwargs.lr: {err}, got {_describe(lr)}")


def _fill_dependent_defaults(cfg: dict) -> None:
    es = cfg["early_stopping"]
    if es["mode"] is None:  # the direction in which the metric improves
        es["mode"] = metric_mode(es["metric"])


def resolved_values(config: Any) -> dict:
    """``config`` checked against the schema, every default filled in (a plain dict).

    Raises:
        ConfigError: one line per problem, each naming the key path and what was expected.
    """
    errors: list[str] = []
    if not isinstance(config, dict):
        raise ConfigError(f"config: expected a mapping of sections, got {_describe(config)}")
    # A run's config.yaml records the values the trainer derived (scaled LR, effective batch)
    # under 'derived'; they are recomputed on every start, so reading them back drops them.
    config = {k: v for k, v in config.items() if k != DERIVED_SECTION}
    resolved = _walk(schema(), config, "", errors)
    if not errors:  # the keys that cross checks combine are only known to be valid now
        _cross_checks(resolved, errors)
    if errors:
        listing = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"invalid config ({len(errors)} problem{'s' * (len(errors) > 1)}):\n{listing}")
    _fill_dependent_defaults(resolved)
    return resolved
