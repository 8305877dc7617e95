"""The ``data:`` section: the built-in generator's causal sets or your own dataset, and the values the
generator allows (``data/causal_sets.py`` and ``data/dataset.py`` read them from here)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import choice, fraction_or_range, integer, list_of, mapping, number, pyobject_of, string
from .base import Section, setting

MANIFOLD_CLASSES: dict[str, int] = {"minkowski_2d": 2, "minkowski_3d": 3, "minkowski_4d": 4}
NON_MANIFOLD_CLASSES: tuple[str, ...] = ("destroyed", "layered")
CSET_TYPES: tuple[str, ...] = (*MANIFOLD_CLASSES, *NON_MANIFOLD_CLASSES)
SPRINKLING_DIMENSIONS: tuple[int, ...] = (2, 3, 4)
VALID_CLASSES: tuple[str, ...] = CSET_TYPES
VALID_TARGETS: tuple[str, ...] = ("cset_type", "manifold_like", "dimension", "myrheim_meyer_dimension")
VALID_EDGES: tuple[str, ...] = ("links", "relations")
VALID_STORAGE: tuple[str, ...] = ("memory", "disk")

_FRACTION = number(0.0, 1.0, exclusive_min=True)


@dataclass(frozen=True)
class DataSection(Section):
    """``data:``: what is generated (or which dataset of yours is built), where it is cached, how it is split."""

    yaml: ClassVar[str] = "data"

    root: str = setting("data", string, "cache directory for generated data sets")
    num_samples: int = setting(2000, integer(3), "causal sets generated (all splits)")
    n_min: int = setting(64, integer(4), "elements per causal set, drawn uniformly from [n_min, n_max]")
    n_max: int = setting(128, integer(4), "the largest causal sets (n_min <= n_max)")
    dimensions: tuple[int, ...] = setting(SPRINKLING_DIMENSIONS, list_of(choice(*SPRINKLING_DIMENSIONS), min_len=1),
                                          "Minkowski dimensions sprinkled into")
    classes: tuple[str, ...] = setting(CSET_TYPES, list_of(choice(*VALID_CLASSES), min_len=1),
                                       "cset types generated: " + ", ".join(VALID_CLASSES))
    destroy_fraction: float | tuple[float, float] = setting(
        0.01, fraction_or_range,
        "share of pairs flipped in destroyed sets, or a range [low, high] drawn from log-uniformly per set")
    edges: str = setting("links", choice(*VALID_EDGES), "graph edges: links (Hasse diagram) or all relations")
    target: str = setting("cset_type", choice(*VALID_TARGETS), "generator's y: " + ", ".join(VALID_TARGETS)
                          + " (multiclass, binary, multiclass, regression under task.type: auto)")
    seed: int = setting(1234, integer(0), "generation seed (part of the cache key)")
    storage: str = setting("memory", choice(*VALID_STORAGE),
                           "memory: every rank holds the generated sets; disk: it holds an index and reads each set "
                           "from the cache's shards when a batch needs it (memory flat in the data size)")
    workers: int | None = setting(None, integer(1), nullable=True,
                                  doc="processes generating a missing cache, per rank (every rank makes a share of "
                                      "it); null: this process's cores / processes on the node, or 1 for a data set "
                                      "that one process makes in under 10 s (by estimate)")
    split: tuple[float, float, float] = setting((0.7, 0.15, 0.15), list_of(_FRACTION, length=3),
                                                "train, validation, test fractions")
    split_seed: int = setting(42, integer(0), "the same on every rank, never the rank")
    type: Any = setting(None, pyobject_of("dataset"), nullable=True,
                        doc="your dataset class (a subclass of torch.utils.data.Dataset, such as PyG's Dataset or "
                            "InMemoryDataset, whose items have x, edge_index, y) or a function marked with "
                            "@QuantumGrav.dataset_factory that returns one (@QG.dataset_factory above def "
                            "my_sets(**kwargs): ..., then data.type: !pyobject my_module.my_sets), built as "
                            "type(**kwargs) on every rank, rank 0 first (docs/your_own_data.md); null: the built-in "
                            "generator (the keys above; split and split_seed apply to both)")
    kwargs: dict[str, Any] = setting({}, mapping, "keyword arguments of data.type")


# The built-in generator's parameters and their defaults: every key above but your own dataset's.
DATA_DEFAULTS: dict[str, Any] = {item.name: item.default for item in dataclasses.fields(DataSection)
                                 if item.name not in ("type", "kwargs")}
DEFAULT_CLASSES: tuple[str, ...] = DATA_DEFAULTS["classes"]
DEFAULT_DIMENSIONS: tuple[int, ...] = DATA_DEFAULTS["dimensions"]
DEFAULT_DESTROY_FRACTION: float = DATA_DEFAULTS["destroy_fraction"]
DEFAULT_N_MIN: int = DATA_DEFAULTS["n_min"]
DEFAULT_N_MAX: int = DATA_DEFAULTS["n_max"]
