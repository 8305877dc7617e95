"""A PyG dataset of generated causal sets, cached on disk, and a deterministic split.

Each causal set becomes a directed graph: nodes are its elements (features
``causal_sets.NODE_FEATURES``), edges point from past to future along its links (the
Hasse diagram, ``edges="links"``) or along all of its relations (``edges="relations"``).
The set is generated once and cached under ``root`` in a folder named by a hash of all
generation parameters, so changing any of them regenerates and the same ones reload.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

from .causal_sets import (CSET_TYPES, DEFAULT_CLASSES, DEFAULT_DESTROY_FRACTION, DEFAULT_DIMENSIONS,
                          DEFAULT_N_MAX, DEFAULT_N_MIN, INVARIANT_NAMES, MANIFOLD_CLASSES, CausalSetRecord,
                          check_generation_args, generate_causal_sets)
from .run_artifacts import atomic_replace

VALID_CLASSES: tuple[str, ...] = CSET_TYPES
VALID_TARGETS: tuple[str, ...] = ("cset_type", "manifold_like", "dimension", "myrheim_meyer_dimension")
# The task each target is learned as (QuantumGrav.tasks); task.type: auto reads it from the dataset.
TARGET_TASKS: dict[str, str] = {"cset_type": "multiclass", "manifold_like": "binary", "dimension": "multiclass",
                                "myrheim_meyer_dimension": "regression"}
VALID_EDGES: tuple[str, ...] = ("links", "relations")

DATA_DEFAULTS: dict[str, Any] = {
    "root": "data",
    "num_samples": 2000,
    "n_min": DEFAULT_N_MIN,
    "n_max": DEFAULT_N_MAX,
    "dimensions": DEFAULT_DIMENSIONS,
    "classes": DEFAULT_CLASSES,
    "destroy_fraction": DEFAULT_DESTROY_FRACTION,
    "edges": "links",
    "target": "cset_type",
    "seed": 1234,
    "split": (0.7, 0.15, 0.15),
    "split_seed": 42,
}
_SPLIT_KEYS = ("split", "split_seed")  # read by the caller, not generation parameters
_OTHER_SOURCE_KEYS = ("type", "kwargs")  # the config's user-dataset source (data_sources), not the generator's
CACHE_FORMAT_VERSION = 3  # bump when the generator or the stored Data change: old caches are then ignored
MANIFOLD_LIKE_NAMES = ["non_manifold_like", "manifold_like"]


def _generation_params(num_samples: int, n_min: int, n_max: int, dimensions: Sequence[int],
                       classes: Sequence[str], destroy_fraction: float | Sequence[float], edges: str, target: str,
                       seed: int) -> dict[str, Any]:
    """The checked parameters as plain JSON types (their hash names the cache folder)."""
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise ValueError(f"num_samples: expected a positive integer, got {num_samples!r}")
    if edges not in VALID_EDGES:
        raise ValueError(f"edges: expected one of {VALID_EDGES}, got {edges!r}")
    if target not in VALID_TARGETS:
        raise ValueError(f"target: expected one of {VALID_TARGETS}, got {target!r}")
    if target == "dimension" and not any(c in MANIFOLD_CLASSES for c in classes):
        raise ValueError(f"classes: target 'dimension' keeps only manifold-like sets, so classes must "
                         f"contain one of {list(MANIFOLD_CLASSES)}, got {list(classes)!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, got {seed!r}")
    check_generation_args(num_samples, n_min, n_max, dimensions, classes, destroy_fraction)
    return {"num_samples": int(num_samples), "n_min": int(n_min), "n_max": int(n_max),
            "dimensions": [int(d) for d in dimensions], "classes": [str(c) for c in classes],
            "destroy_fraction": _json_fraction(destroy_fraction), "edges": edges, "target": target, "seed": int(seed)}


def _json_fraction(destroy_fraction: float | Sequence[float]) -> float | list[float]:
    """A flip fraction or [low, high] range as JSON (checked by ``check_generation_args`` before)."""
    if isinstance(destroy_fraction, (list, tuple)):
        return [float(v) for v in destroy_fraction]
    return float(destroy_fraction)


def _cache_key(params: dict[str, Any]) -> str:
    text = json.dumps({**params, "format_version": CACHE_FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def past_to_future_edges(adjacency: np.ndarray) -> torch.Tensor:
    """Edge index [2, E] of a 0/1 relation or link matrix: an edge i -> j for every i preceding j."""
    return torch.from_numpy(np.stack(np.nonzero(adjacency))).long()


class CausalSetDataset(InMemoryDataset):
    """Generated causal sets as PyG graphs, labelled for one of ``VALID_TARGETS``.

    * ``target="cset_type"``: y indexes ``classes`` (e.g. 2d/3d/4d sprinklings, destroyed, layered).
    * ``target="manifold_like"``: y = 1 for sprinklings, 0 for the non-manifold-like orders.
    * ``target="dimension"``: only the ``minkowski_{d}d`` classes are generated; y indexes their d.
    * ``target="myrheim_meyer_dimension"``: y (float [1]) is the set's Myrheim-Meyer dimension estimate
      (from its ordering fraction), a continuous target for regression, over all ``classes``.

    Each ``Data`` has ``x`` (float32 N x F), ``edge_index`` (past -> future), ``y`` (long [1], float for
    regression),
    ``manifold_like`` (bool [1]), ``dimension`` (long [1], -1 where undefined), ``cset_type``
    (long [1], index into ``causal_sets.CSET_TYPES``), ``flip_fraction`` (float [1], 0 except
    for destroyed sets), ``num_nodes`` and ``invariants`` (float [1, K], columns
    ``causal_sets.INVARIANT_NAMES``) for the baselines and hybrid models.
    ``destroy_fraction`` may be a range [low, high]: each destroyed set then draws its own.
    """

    def __init__(self, root: str | os.PathLike, *, num_samples: int = DATA_DEFAULTS["num_samples"],
                 n_min: int = DATA_DEFAULTS["n_min"], n_max: int = DATA_DEFAULTS["n_max"],
                 dimensions: Sequence[int] = DATA_DEFAULTS["dimensions"],
                 classes: Sequence[str] = DATA_DEFAULTS["classes"],
                 destroy_fraction: float | Sequence[float] = DATA_DEFAULTS["destroy_fraction"],
                 edges: str = DATA_DEFAULTS["edges"], target: str = DATA_DEFAULTS["target"],
                 seed: int = DATA_DEFAULTS["seed"], log: bool = False, transform: Callable | None = None):
        self._params = _generation_params(num_samples, n_min, n_max, dimensions, classes,
                                          destroy_fraction, edges, target, seed)
        self._cache_key = _cache_key(self._params)
        super().__init__(str(root), transform=transform, log=log)
        path = Path(self.processed_paths[0])
        if not path.is_file():
            self._generate_and_cache(path)
        self.load(str(path))

    @classmethod
    def from_config(cls, data_cfg: dict[str, Any]) -> "CausalSetDataset":
        """Build from the config's ``data:`` section (keys of ``DATA_DEFAULTS``; missing keys take the
        defaults). ``split``/``split_seed`` belong to the caller: see ``split_indices``; ``type``/``kwargs``
        name a dataset class to use instead of this one (``data_sources``) and are ignored here."""
        data_cfg = {k: v for k, v in data_cfg.items() if k not in _OTHER_SOURCE_KEYS}
        unknown = sorted(set(data_cfg) - set(DATA_DEFAULTS))
        if unknown:
            raise ValueError(f"data_cfg: unknown keys {unknown}; expected keys from {sorted(DATA_DEFAULTS)}")
        cfg = {**DATA_DEFAULTS, **data_cfg}
        kwargs = {key: cfg[key] for key in DATA_DEFAULTS if key not in (*_SPLIT_KEYS, "root")}
        return cls(cfg["root"], **{**kwargs, "dimensions": tuple(cfg["dimensions"]), "classes": tuple(cfg["classes"])})

    # ------------------------------------------------------------------ PyG file layout
    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_file_names(self) -> list[str]:
        return ["causal_sets.pt"]

    @property
    def processed_dir(self) -> str:
        return os.path.join(self.root, f"causal_sets_{self._cache_key}")

    # ------------------------------------------------------------------ labels
    @property
    def generation_params(self) -> dict[str, Any]:
        return copy.deepcopy(self._params)

    @property
    def task(self) -> str:
        """How ``y`` is learned: multiclass, binary or regression (``QuantumGrav.tasks``)."""
        return TARGET_TASKS[self._params["target"]]

    @property
    def class_names(self) -> list[str]:
        target, classes = self._params["target"], self._params["classes"]
        if target == "myrheim_meyer_dimension":
            return []
        if target == "cset_type":
            return list(classes)
        if target == "manifold_like":
            return list(MANIFOLD_LIKE_NAMES)
        return [f"d={d}" for d in self._dimensions()]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def _dimensions(self) -> list[int]:
        return sorted(MANIFOLD_CLASSES[c] for c in self._params["classes"] if c in MANIFOLD_CLASSES)

    def _label(self, record: CausalSetRecord) -> torch.Tensor:
        target = self._params["target"]
        if target == "myrheim_meyer_dimension":
            return torch.tensor([record.invariants[INVARIANT_NAMES.index(target)]], dtype=torch.float32)
        return torch.tensor([self._class_index(record)], dtype=torch.long)

    def _class_index(self, record: CausalSetRecord) -> int:
        target = self._params["target"]
        if target == "cset_type":
            return self._params["classes"].index(record.cset_type)
        if target == "manifold_like":
            return int(record.manifold_like)
        return self._dimensions().index(record.dimension)

    # ------------------------------------------------------------------ generation
    def _generate_and_cache(self, path: Path) -> None:
        params = self._params
        classes = params["classes"]
        if params["target"] == "dimension":
            classes = [c for c in classes if c in MANIFOLD_CLASSES]
        if self.log:
            print(f"Generating {params['num_samples']} causal sets into {path.parent}", file=sys.stderr)
        records = generate_causal_sets(params["num_samples"], n_min=params["n_min"], n_max=params["n_max"],
                                       dimensions=params["dimensions"], classes=classes,
                                       destroy_fraction=params["destroy_fraction"], seed=params["seed"])
        data_list = [self._to_data(record) for record in records]
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_replace(path.parent / "params.json", lambda tmp: Path(tmp).write_text(json.dumps(params, indent=2)))
        atomic_replace(path, lambda tmp: self.save(data_list, tmp))

    def _to_data(self, record: CausalSetRecord) -> Data:
        adjacency = record.link_matrix if self._params["edges"] == "links" else record.causal_matrix
        return Data(x=torch.from_numpy(record.features), edge_index=past_to_future_edges(adjacency),
                    y=self._label(record),
                    manifold_like=torch.tensor([record.manifold_like]),
                    dimension=torch.tensor([record.dimension], dtype=torch.long),
                    cset_type=torch.tensor([CSET_TYPES.index(record.cset_type)], dtype=torch.long),
                    invariants=torch.from_numpy(record.invariants).reshape(1, -1),
                    flip_fraction=torch.tensor([record.flip_fraction], dtype=torch.float32),
                    num_nodes=record.num_elements)


def split_indices(num_items: int, fractions: Sequence[float], seed: int) -> tuple[list[int], list[int], list[int]]:
    """Disjoint (train, val, test) index lists covering range(num_items), sizes by ``fractions``.

    A function of its arguments only (its own generator seeded with ``seed``): every
    process computes the same split. Each part gets at least one item.
    """
    if not isinstance(num_items, (int, np.integer)) or num_items < 3:
        raise ValueError(f"num_items: expected an integer >= 3 so that train, val and test are all "
                         f"non-empty, got {num_items!r}")
    fractions = [float(f) for f in fractions]
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions: expected three positive fractions (train, val, test) summing to 1, "
                         f"got {fractions}")
    num_val = max(1, round(fractions[1] * num_items))
    num_test = max(1, round(fractions[2] * num_items))
    while num_items - num_val - num_test < 1:  # only for tiny num_items: take from the larger part
        if num_val >= num_test:
            num_val -= 1
        else:
            num_test -= 1
    order = np.random.default_rng(seed).permutation(num_items)
    val, test, train = np.split(order, [num_val, num_val + num_test])
    return sorted(train.tolist()), sorted(val.tolist()), sorted(test.tolist())
