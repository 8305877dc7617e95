"""Loading configs: read YAML (or take a dict), apply ``section.key=value`` overrides, validate every key
against the sections (``layout``), fill defaults and return the resolved dict.

A config is a plain nested dict (the seeds index it as ``config["parallel"]["world_size"]``); its typed, frozen
sections are ``config.sections``. Problems are reported as ``key.path: expected ..., got ...``, all of them in
one ConfigError.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..common.errors import ConfigError
from .checks import _describe
from .layout import ConfigSections, config_sections
from .smoke_test import apply_smoke_test, cap_file_epochs
from .validation import resolved_values
from .yaml_io import apply_overrides, dump_config, merge_configs, parse_override, read_config_file


class ResolvedConfig(dict):
    """A config that ``validate_config`` accepted, every default filled in: a plain dict to read and index,
    which also remembers what it held when it was validated. The library validates a config once, where it
    enters (the CLI, ``QG.launch``, a trainer given a path or a raw dict); components that receive a
    ResolvedConfig trust it. One edited since (a notebook's ``config["training"]["num_epochs"] = 2``) is no
    longer trusted and is validated again where it enters next (``resolve_config``)."""

    def __init__(self, values: dict):
        super().__init__(values)
        self.validated_text = dump_config(self)
        # The same values as typed, frozen sections (sections.optimizer.lr), which later edits of the dict do not reach.
        self.sections: ConfigSections = config_sections(self)

    def unchanged(self) -> bool:
        return dump_config(self) == self.validated_text


def with_world_size(config: ResolvedConfig, world_size: int) -> ResolvedConfig:
    """``config`` for a job of ``world_size`` processes (what a launcher knows better than the file): a
    copy that stays validated (an integer >= 1 is a valid ``parallel.world_size``)."""
    if config["parallel"]["world_size"] == world_size:
        return config
    changed = copy.deepcopy(dict(config))
    changed["parallel"] = {**changed["parallel"], "world_size": world_size}
    return ResolvedConfig(changed)


def resolve_config(config: Any) -> ResolvedConfig:
    """``config`` itself when it is a ResolvedConfig that nobody edited since, else ``load_config(config)``:
    what every entry point calls, so that a config is validated once per process."""
    if isinstance(config, ResolvedConfig) and config.unchanged():
        return config
    return load_config(config)


def validate_config(config: Any) -> ResolvedConfig:
    """Check a config against the schema and fill in every default.

    Args:
        config: a mapping of sections (``training``, ``model``, ...), as read from YAML.

    Returns:
        The resolved config (a ``ResolvedConfig``, a dict) with every key present.

    Raises:
        ConfigError: one line per problem, each naming the key path and what was expected, e.g.
            ``training.batch_size: expected an integer >= 1, got 0``.
    """
    return ResolvedConfig(resolved_values(config))


def _read_source(source: str | Path | Mapping[str, Any] | None) -> dict:
    if source is None:
        return {}
    raw = copy.deepcopy(dict(source)) if isinstance(source, Mapping) else read_config_file(source)
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping of sections at the top level, got {_describe(raw)}")
    return raw if isinstance(source, Mapping) else cap_file_epochs(raw)


def overridden_keys(overrides: Iterable[str] | Mapping[str, Any] | None) -> list[str]:
    """The dotted keys that ``overrides`` (as ``apply_overrides`` takes them, already checked there) set."""
    if not overrides:
        return []
    return list(overrides) if isinstance(overrides, Mapping) else [parse_override(text)[0] for text in overrides]


def load_config(
    source: str | Path | Mapping[str, Any] | list | tuple | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
) -> ResolvedConfig:
    """Read, override and validate a config and return it with every default filled in.

    Args:
        source: a YAML path, a dict, None (all defaults), or a list of these laid over each other in order,
            e.g. ``["configs/train_ddp.yaml", "configs/logger/wandb_ddp.yaml"]``.
        overrides: applied after merging, as in ``apply_overrides``: ``"section.key=value"`` strings or a
            mapping.

    Returns:
        The resolved config (a ``ResolvedConfig``, a dict); the trainers and launchers take it as it is.

    Raises:
        ConfigError: a missing or unreadable file, invalid YAML, a malformed override, or a value the schema
            refuses (every problem at once, each naming its key).

    Example:
        >>> import QuantumGrav as QG
        >>> config = QG.load_config("configs/train.yaml", ["training.num_epochs=3"])
        >>> config["training"]["num_epochs"]
        3
    """
    sources = source if isinstance(source, (list, tuple)) else [source]
    raw: dict = {}
    for item in sources:
        raw = merge_configs(raw, _read_source(item))
    return validate_config(apply_smoke_test(apply_overrides(raw, overrides), overridden_keys(overrides)))


