"""YAML text of configs: the ``!pyobject`` tag (read and written), files, overrides and merging."""

from __future__ import annotations

import copy
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ..common.errors import ConfigError

PYOBJECT_TAG = "!pyobject"


@dataclass(frozen=True)
class UnresolvedPyObject:
    """A `!pyobject` path that did not import; validation reports it with its key path."""

    path: str
    reason: str


def resolve_pyobject(path: str) -> Any:
    """Import ``package.module.attr`` (attributes may be nested) and return the object."""
    parts = path.strip().split(".")
    if not all(p.isidentifier() for p in parts):
        raise ImportError(f"'{path}' is not a dotted Python path")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and not (module_name == err.name or module_name.startswith(err.name + ".")):
                raise  # the module exists but one of *its* imports is missing
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module named '{parts[0]}'")


def _construct_pyobject(loader: yaml.Loader, node: yaml.Node) -> Any:
    path = loader.construct_scalar(node)
    try:
        return resolve_pyobject(path)
    except (ImportError, AttributeError) as err:
        return UnresolvedPyObject(path, str(err))


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor(PYOBJECT_TAG, _construct_pyobject)
# YAML 1.1 reads `lr: 1e-3` as the string '1e-3' (it wants a dot); read it as a float.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def get_loader() -> type[yaml.SafeLoader]:
    """The YAML loader that understands ``!pyobject dotted.path`` (a class or function to import).

    Returns:
        A ``yaml.SafeLoader`` subclass; use it for config files you trust (see the configuration reference,
        "Trust").

    Example:
        >>> import yaml, QuantumGrav as QG
        >>> yaml.load("optimizer: !pyobject torch.optim.AdamW", QG.get_loader())["optimizer"].__name__
        'AdamW'
    """
    return _Loader


def pyobject_path(obj: Any) -> str:
    """``torch.optim.AdamW`` -> 'torch.optim.adamw.AdamW' style dotted path of a class or function."""
    return f"{obj.__module__}.{obj.__qualname__}"


def is_pyobject(value: Any) -> bool:
    return callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__")


class _Dumper(yaml.SafeDumper):
    def represent_data(self, data: Any) -> yaml.Node:  # classes/functions -> !pyobject
        if is_pyobject(data):
            return self.represent_scalar(PYOBJECT_TAG, pyobject_path(data))
        if isinstance(data, tuple):
            return self.represent_list(list(data))
        return super().represent_data(data)


def dump_config(config: Mapping[str, Any]) -> str:
    """Write a config as YAML text (what a run saves as ``config.yaml``).

    Args:
        config: a config, usually resolved by ``load_config``; classes and functions in it are written as
            ``!pyobject dotted.path``.

    Returns:
        The YAML text; ``yaml.load(text, QG.get_loader())`` reads the same values back.
    """
    return yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False, default_flow_style=None)


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, _Loader)


def parse_override(text: str) -> tuple[str, Any]:
    """'training.num_epochs=3' -> ('training.num_epochs', 3); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. --set training.num_epochs=3")
    try:
        value = load_yaml_text(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({err.problem})") from None
    return key.strip(), value


def _python_override_value(value: Any) -> Any:
    """A Python override given as YAML's ``'!pyobject dotted.path'`` text means the object, as with --set
    (plain strings stay strings: only this tag is read, so a run name like 'a: b' is not parsed)."""
    if isinstance(value, str) and value.lstrip().startswith(PYOBJECT_TAG + " "):
        return load_yaml_text(value)
    return value


def apply_overrides(config: dict, overrides: Iterable[str] | Mapping[str, Any] | None) -> dict:
    """Return a copy of ``config`` with dotted-key overrides applied; ``config`` itself is not changed.

    Args:
        config: a config (a mapping of sections); not validated here.
        overrides: ``"section.key=value"`` strings (the value read as YAML, as ``--set`` reads it) or a mapping
            ``{"section.key": value}``; None or empty: no change.

    Returns:
        The new config.

    Raises:
        ConfigError: an override string that is not ``section.key=value`` or not valid YAML, or a dotted key
            that runs through a key that is not a section.

    Example:
        >>> import QuantumGrav as QG
        >>> QG.apply_overrides({"training": {"num_epochs": 20}}, ["training.num_epochs=3"])
        {'training': {'num_epochs': 3}}
    """
    out = copy.deepcopy(config)
    if not overrides:
        return out
    if isinstance(overrides, Mapping):
        items = [(key, _python_override_value(value)) for key, value in overrides.items()]
    else:
        items = map(parse_override, overrides)
    for dotted, value in items:
        node = out
        *parents, leaf = dotted.split(".")
        for i, part in enumerate(parents):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(parents[: i + 1])}: cannot set '{dotted}', this key is not a section")
            node = child
        node[leaf] = value
    return out


def read_config_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else f"does not exist (looked in {Path.cwd()})"
        raise ConfigError(f"config file '{path}' {problem}; pass the path of a YAML config, such as "
                          "configs/train.yaml of the QuantumGrav repository")
    try:
        with path.open(encoding="utf-8") as f:
            data = yaml.load(f, _Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read it as a UTF-8 text file ({reason})") from None
    return data if data is not None else {}


def merge_configs(base: dict, extra: Mapping[str, Any]) -> dict:
    """``base`` with ``extra`` laid over it, section by section (``extra`` wins)."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_configs(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def find_unimportable(config: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(key path, dotted path) of every callable a freshly spawned process could not import."""
    found: list[tuple[str, str]] = []
    if isinstance(config, dict):
        for key, value in config.items():
            found += find_unimportable(value, f"{prefix}{key}.")
    elif isinstance(config, (list, tuple)):
        for i, value in enumerate(config):
            found += find_unimportable(value, f"{prefix}{i}.")
    elif is_pyobject(config):
        path = pyobject_path(config)
        if config.__module__ == "__main__" or "<locals>" in config.__qualname__ or "<lambda>" in path:
            found.append((prefix.rstrip("."), path))
    return found
