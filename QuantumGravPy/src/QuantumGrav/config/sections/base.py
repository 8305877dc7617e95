"""How a config section is declared: a frozen dataclass whose fields each say their YAML key, default, check
and one-line doc, once. Validation, the defaults of a resolved config and docs/configuration.md are read
from these declarations."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator, Mapping

from ..checks import Field
from ..yaml_io import resolve_pyobject


class FrozenDict(dict):
    """A mapping value of a section (``optimizer.kwargs``, ...): a dict that refuses changes, so that a
    section cannot be edited behind its validation; it pickles and copies as a dict does."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a config section is frozen: change the config and load it again")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __hash__(self) -> int:  # the dataclass of a section refuses unhashable defaults
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple:
        return FrozenDict, (dict(self),)


def freeze(value: Any) -> Any:
    """Lists as tuples and mappings as FrozenDicts, all the way down."""
    if isinstance(value, Mapping):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """The plain YAML form of a frozen value: lists and dicts, as a resolved config holds them."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


@dataclass(frozen=True)
class PyObjectName:
    """A default given by its dotted path, imported when first read: an object of a module above config/, or
    with ``keyword`` that keyword's default in the object's signature (the built-in model's defaults are
    declared once, by ``GNNClassifier``)."""

    path: str
    keyword: str | None = None

    def resolve(self) -> Any:
        named = resolve_pyobject(self.path)
        return named if self.keyword is None else inspect.signature(named).parameters[self.keyword].default


def setting(default: Any, check: Callable[[Any], Any], doc: str, *, nullable: bool = False,
            key: str | None = None) -> Any:
    """One config key of a section: its default, its check and its one-line doc. ``key``: its YAML path
    when it is not ``<section's yaml>.<field name>``."""
    return field(default=freeze(default), metadata={"check": check, "doc": doc, "nullable": nullable, "key": key})


def subsection(cls: type[Section], *, optional: bool = False) -> Any:
    """A section within a section; ``optional``: None when the config leaves it out or gives null."""
    if optional:
        return field(default=None, metadata={"section": cls, "optional": True})
    return field(default_factory=cls, metadata={"section": cls, "optional": False})


@dataclass(frozen=True)
class Section:
    """A typed, frozen config section. ``yaml`` is the YAML section its settings read ('' for the top level):
    a setting's key is ``<yaml>.<field name>`` unless it names its own."""

    yaml: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if isinstance(value, PyObjectName):
                object.__setattr__(self, item.name, freeze(value.resolve()))

    def as_mapping(self) -> dict[str, Any]:
        """The section as the plain mapping its YAML keys hold (``sections.data.as_mapping()["n_min"]``), for the
        functions that take a section as a dict (``QG.CausalSetDataset.from_config``)."""
        mapping: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if "section" in item.metadata:
                mapping[item.name] = None if value is None else value.as_mapping()
            else:
                mapping[setting_key(type(self), item).rsplit(".", 1)[-1]] = thaw(value)
        return mapping


def setting_key(cls: type[Section], item: dataclasses.Field) -> str:
    """The YAML key path that the setting ``item`` of ``cls`` reads."""
    return item.metadata["key"] or (f"{cls.yaml}.{item.name}" if cls.yaml else item.name)


def settings(cls: type[Section]) -> Iterator[tuple[str, dataclasses.Field]]:
    """(YAML key path, dataclass field) of every setting of ``cls`` and its subsections, in declaration order."""
    for item in dataclasses.fields(cls):
        if "section" in item.metadata:
            yield from settings(item.metadata["section"])
        else:
            yield setting_key(cls, item), item


def schema_field(item: dataclasses.Field) -> Field:
    """The setting as validation reads it, its default in the resolved config's (YAML) form."""
    default = item.default
    if isinstance(default, PyObjectName):
        default = default.resolve()
    meta = item.metadata
    return Field(meta["check"], thaw(default), meta["nullable"], meta["doc"])


def optional_sections(cls: type[Section]) -> Iterator[str]:
    """The YAML paths of the subsections that may be null."""
    for item in dataclasses.fields(cls):
        if "section" in item.metadata:
            sub = item.metadata["section"]
            if item.metadata["optional"]:
                yield sub.yaml
            yield from optional_sections(sub)


def lookup(config: Mapping[str, Any], path: str) -> Any:
    """The value at the dotted ``path`` of a resolved config."""
    node: Any = config
    for part in path.split("."):
        node = node[part]
    return node


def section_from(cls: type[Section], resolved: Mapping[str, Any]) -> Section:
    """The section ``cls`` of a resolved config (every key present), its values frozen."""
    values = {}
    for item in dataclasses.fields(cls):
        sub = item.metadata.get("section")
        if sub is None:
            values[item.name] = freeze(lookup(resolved, setting_key(cls, item)))
        elif item.metadata["optional"] and lookup(resolved, sub.yaml) is None:
            values[item.name] = None
        else:
            values[item.name] = section_from(sub, resolved)
    return cls(**values)


def yaml_tree(cls: type[Section]) -> dict[str, Any]:
    """The YAML layout that ``cls`` reads: nested mappings of sections, a Field at each key."""
    tree: dict[str, Any] = {}
    for path, item in settings(cls):
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = schema_field(item)
    return tree


def defaults_of(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The default values of a YAML layout (``yaml_tree``), nested as a resolved config holds them."""
    return {key: defaults_of(item) if isinstance(item, dict) else item.default for key, item in tree.items()}
