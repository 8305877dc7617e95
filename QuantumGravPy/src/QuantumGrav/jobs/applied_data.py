"""The data a trained run is applied to (``applied_run``): the ``data:`` section of a YAML config, built as training
builds it, or QuantumGrav.jl stores. Either is read as the run's model needs it (the run's edges, target and
classes) and checked against the run before any set is predicted: what does not fit is one UserError that says
what is wrong and how to fix it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..config.schema import load_config
from ..config.layout import ConfigSections
from ..data.dataset import split_indices
from ..data.derived_invariants import with_order_invariants
from ..data.sources import item_problem, source_name
from ..data.node_targets import NODE_TARGET_TASKS
from ..data.relation_targets import RELATION_TARGET_TASKS
from ..data.zarr_store import (DEFAULT_EDGES, DEFAULT_TARGET, JULIA_CSET_TYPES,
                               QuantumGravJLDataset)
from ..distributed.runtime import Runtime
from ..common.errors import UserError
from ..training.loaders import load_dataset
from ..tasks.base import Task
from ..tasks.classification import ClassificationTask

SPLITS = ("all", "test")
DataPaths = str | os.PathLike | Sequence[str | os.PathLike]
# How stores are read, whatever is asked of their sets: what evaluate's store_options (--store-option) may set. A run
# trained on stores passes its own on (its data.kwargs), so that new stores are read as it read its own.
STORE_OPTIONS = ("max_elements", "not_partial_orders", "cache", "cache_dir", "cset_type_encoding")


@dataclass
class AppliedData:
    """The sets to predict: ``dataset``, the ``indices`` of those evaluated (all, or its test split), ``name`` (the
    default output folder's), ``describe_set(index)`` (a set's id columns), the ``first`` set (for the model's
    check) and ``set_parameters(index)``, what the data records of a set besides its kind (a store's group
    attributes: the drawn defect parameters; None for data that records none)."""

    name: str
    dataset: Any
    indices: list[int]
    describe_set: Callable[[int], dict[str, Any]]
    first: Any
    set_parameters: Callable[[int], dict[str, Any]] | None = None


def open_data(data: DataPaths, split: str, run: ConfigSections, task: Task, in_channels: int,
              runtime: Runtime, store_options: dict[str, Any] | None = None) -> AppliedData:
    """``data`` (a YAML config, or stores and folders of stores) as the run ``run`` (its config's sections), trained
    for ``task`` on items of ``in_channels`` node features, reads it; ``split``: ``all`` or ``test`` (the test part
    of the split training would make of it: the config's ``data.split`` and ``data.split_seed``, for stores the
    run's). ``store_options``: how stores are read (``STORE_OPTIONS``: ``QuantumGravJLDataset``'s arguments)."""
    if split not in SPLITS:
        raise UserError(f"split: expected one of {SPLITS}, got {split!r}")
    store_options = _checked_store_options(store_options)
    paths = _existing_paths(data)
    configs = [path for path in paths if path.is_file()]
    if configs and len(paths) > 1:
        raise UserError(f"data: one YAML config, or QuantumGrav.jl stores; got the config {configs[0]} and "
                        f"{len(paths) - 1} more path(s)")
    if configs:
        config = load_config(paths[0])
        data_cfg = _as_the_run_reads(config.sections.data.as_mapping(), run, task, store_options)
        source = f"{paths[0]} ({source_name(data_cfg)})"
        dataset = load_dataset(data_cfg, run.parallel.data_timeout_s, runtime)
        if isinstance(dataset, QuantumGravJLDataset):
            _check_store_kinds(dataset, task, source)
        fractions, seed = data_cfg["split"], data_cfg["split_seed"]
    else:
        source = f"QuantumGrav.jl data {', '.join(str(p) for p in paths)}"
        dataset = QuantumGravJLDataset(paths, **_store_kwargs(store_options, run, task), **_without_labels(run))
        _check_store_kinds(dataset, task, source)
        fractions, seed = run.data.split, run.data.split_seed
    model = run.model
    reads_invariants = ["model.graph_features"] if model.type is None and model.graph_features else []
    dataset = with_order_invariants(dataset, reads_invariants, source)
    first = _check_fits(dataset, task, in_channels, source)
    indices = list(range(len(dataset))) if split == "all" else split_indices(len(dataset), fractions, seed)[2]
    return AppliedData(_name(paths, split), dataset, indices, _set_ids(dataset), first, _set_parameters(dataset))


def _existing_paths(data: DataPaths) -> list[Path]:
    paths = [Path(data)] if isinstance(data, (str, os.PathLike)) else [Path(p) for p in data]
    if not paths:
        raise UserError("data: give a YAML config with a data: section, or QuantumGrav.jl stores or folders of them")
    for path in paths:
        if not path.exists():
            raise UserError(f"data: {path}: no such file or folder; give a YAML config with a data: section, a "
                            f"QuantumGrav.jl store or a folder of stores")
    return paths


# What a run can have learned from stores: their per-set labels, and the per-element and per-pair ones our generator
# records (node_targets, relation_targets; QuantumGrav.jl's own stores lack them, and their sets are then scored
# without truth).
LOCATING_TARGETS = (*NODE_TARGET_TASKS, *RELATION_TARGET_TASKS)
STORE_TARGETS = ("manifold_like", "cset_type", *LOCATING_TARGETS)


def _learned(run: ConfigSections) -> tuple[str | None, str | None]:
    """The target and edges the run was trained on: the generator's or the stores' (None: the run's own dataset
    class, whose labels this code does not know)."""
    data = run.data
    if data.type is None:
        return data.target, data.edges
    if _reads_stores(data.type):
        return data.kwargs.get("target", DEFAULT_TARGET), data.kwargs.get("edges", DEFAULT_EDGES)
    return None, None


def _reads_stores(data_type: Any) -> bool:
    """Whether a data.type reads QuantumGrav.jl's stores: their reader, or a subclass (KindsDataset, the nine kinds
    generated here and written as stores) that takes its target and edges."""
    return isinstance(data_type, type) and issubclass(data_type, QuantumGravJLDataset)


def _as_the_run_reads(data_cfg: dict[str, Any], run: ConfigSections, task: Task,
                      store_options: dict[str, Any]) -> dict[str, Any]:
    """A config's ``data:`` section made into the graphs and labels the run learned: the generator's or the stores'
    target and edges are the run's (the config chooses the sets, the run what is asked of them)."""
    target, edges = _learned(run)
    if _reads_stores(data_cfg["type"]):
        kwargs = _store_kwargs({**data_cfg["kwargs"], **store_options}, run, task)
        if data_cfg["type"] is QuantumGravJLDataset:  # a subclass (KindsDataset) writes its own labels
            kwargs.update(_without_labels(run))
        return {**data_cfg, "kwargs": kwargs}
    if data_cfg["type"] is None and target in LOCATING_TARGETS:
        unit = "element" if target in NODE_TARGET_TASKS else "pair of elements"
        raise UserError(f"data: the run learned {target}, one label per {unit}, which only stores record (our "
                        f"generator's, QuantumGrav.data.kinds.KindsDataset); this config's data: section builds the "
                        f"built-in generator's sets, which have no {target}. Give a config whose data.type reads "
                        f"stores (e.g. configs/inserted_block.yaml, configs/toggled_relations.yaml), or the stores "
                        f"themselves")
    if data_cfg["type"] is None and target is not None:
        return {**data_cfg, "target": target, "edges": edges}
    return data_cfg


def _store_kwargs(kwargs: dict[str, Any], run: ConfigSections, task: Task) -> dict[str, Any]:
    """``QuantumGravJLDataset``'s keyword arguments for reading stores as the run learned: its target and edges,
    and for ``cset_type`` its classes in its order (so that y indexes the model's outputs)."""
    target, edges = _learned(run)
    if target not in STORE_TARGETS:
        learned = (f"data.target {target}" if target else
                   f"the labels of its own dataset class ({run.data.type.__qualname__})")
        raise UserError(f"data: the run learned {learned}, a {task.type} task; QuantumGrav.jl stores label their "
                        f"sets with manifold_like and cset_type only (our generator's stores also their elements "
                        f"with {', '.join(NODE_TARGET_TASKS)}, their pairs with {', '.join(RELATION_TARGET_TASKS)}). Apply a run trained on one of those (the generator's "
                        f"data.target, or stores), or give a config of data like the run's")
    if _reads_stores(run.data.type):  # how the run read its own stores, unless the data or the caller says otherwise
        kwargs = {**{key: run.data.kwargs[key] for key in STORE_OPTIONS if key in run.data.kwargs}, **kwargs}
    if target == "cset_type":
        foreign = [name for name in task.class_names if name not in JULIA_CSET_TYPES.values()]
        if foreign:
            raise UserError(f"data: the run's classes ({', '.join(task.class_names)}) are the generator's cset types, "
                            f"not QuantumGrav.jl's ({', '.join(JULIA_CSET_TYPES.values())}); apply a run trained on "
                            "stores, or on data.target manifold_like")
        kwargs = {**kwargs, "cset_types": task.class_names}
    return {**kwargs, "target": target, "edges": edges}


def _without_labels(run: ConfigSections) -> dict[str, Any]:
    """For a run that learned a per-element target: stores that record no labels of it (QuantumGrav.jl's own) are
    read with their truth unknown, to be scored only; training refuses them, applying a run needs no truth."""
    return {"missing_labels": "unknown"} if _learned(run)[0] in LOCATING_TARGETS else {}


def _checked_store_options(options: dict[str, Any] | None) -> dict[str, Any]:
    options = dict(options or {})
    unknown = sorted(set(options) - set(STORE_OPTIONS))
    if unknown:
        raise UserError(f"store options: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not how stores "
                        f"are read; expected some of {', '.join(STORE_OPTIONS)} (QuantumGravJLDataset's arguments)")
    return options


def _check_store_kinds(dataset: QuantumGravJLDataset, task: Task, source: str) -> None:
    """Stores read by cset_type hold only kinds the run learned: another kind has no output of the model."""
    unknown = [name for name in dataset.found_cset_types if name not in task.class_names]
    if dataset.target == "cset_type" and unknown:
        raise UserError(f"{source}: it holds {', '.join(unknown)} sets, a kind the run did not learn (its classes: "
                        f"{', '.join(task.class_names)}); leave those stores out, or apply a run trained on them")


def _check_fits(dataset: Any, task: Task, in_channels: int, source: str) -> Any:
    """The first, middle and last sets have the run's node features and labels of its task, and the dataset's task
    and classes (where it declares them) are the run's; returns the first set."""
    if len(dataset) == 0:
        raise UserError(f"{source}: no causal sets to evaluate")
    declared_task = getattr(dataset, "task", None)
    if declared_task is not None and declared_task != task.type:
        raise UserError(f"{source}: its sets are labelled for a {declared_task} task, but the run learned a "
                        f"{task.type} task; apply the run to data labelled as its training data was")
    declared_classes = getattr(dataset, "class_names", None)
    if isinstance(task, ClassificationTask) and declared_classes and list(declared_classes) != task.class_names:
        raise UserError(f"{source}: its classes are {list(declared_classes)}, but the run learned "
                        f"{task.class_names}; choose data of the run's classes, in its order")
    for position in sorted({0, len(dataset) // 2, len(dataset) - 1}):
        item = dataset[position]
        problem = item_problem(item)
        if problem is None and item.x.size(1) != in_channels:
            problem = (f"its sets have {item.x.size(1)} node features (x's columns), but the run's model reads "
                       f"{in_channels}; make the data's node features as the training data's")
        # A set whose truth is unknown (y of NaN: missing_labels) is checked for its shape only.
        problem = problem or task.target_problem(torch.zeros_like(item.y) if _unknown(item.y) else item.y)
        if problem:
            raise UserError(f"{source}: set {position} does not fit the run ({task.describe()}): {problem}")
    return dataset[0]


def _unknown(y: Any) -> bool:
    return isinstance(y, torch.Tensor) and y.is_floating_point() and bool(torch.isnan(y).any())


def _set_ids(dataset: Any) -> Callable[[int], dict[str, Any]]:
    """A set's id columns: its index in the data, and for stores' sets the store and group it is read from."""
    store_and_group = getattr(dataset, "store_and_group", None)
    if store_and_group is None:
        return lambda index: {"set": index}
    return lambda index: dict(zip(("set", "store", "group"), (index, *store_and_group(index))))


def _set_parameters(dataset: Any) -> Callable[[int], dict[str, Any]] | None:
    """A set's recorded parameters (``describe(index)`` but what identifies it and its kind), for data that
    describes its sets."""
    describe = getattr(dataset, "describe", None)
    if not callable(describe):
        return None
    return lambda index: {key: value for key, value in describe(index).items() if key not in ("store", "group", "kind")}


def _name(paths: list[Path], split: str) -> str:
    """The data's name in the default output folder: the config's or the store's (or folder's) name."""
    first = paths[0].name.removesuffix(".zarr").removesuffix(".yaml").removesuffix(".yml")
    more = f"+{len(paths) - 1}_more" if len(paths) > 1 else ""
    return f"{first}{more}" + ("_test" if split == "test" else "")
