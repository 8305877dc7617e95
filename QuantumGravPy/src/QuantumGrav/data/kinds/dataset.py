"""QuantumGrav.jl's nine kinds as a training data set: generated here in equal numbers, written as QuantumGrav.jl's
stores (``stores``) and read back by the same reader as the stores QuantumGrav.jl writes, so that a model trained
on one trains and evaluates on the other unchanged.

In a config (``configs/manifold_like.yaml``)::

    data:
      type: !pyobject QuantumGrav.data.kinds.KindsDataset
      kwargs: {path: data/kinds, num_per_kind: 1000, target: manifold_like}
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from ...common.files import atomic_write_text
from ...common.processes import cores_per_process
from ..dataset import POOL_WORTH_SECONDS
from ...common.version import __version__
from ..zarr_store import QuantumGravJLDataset
from .catalogue import DEFECT_SIZE_ARGUMENTS, GENERATORS, generator_options
from .common import DEFAULT_N_RANGE
from .merged import MIN_BLOCK_SIZE
from .stores import BLOCK_SIZE, check_kinds, write_kind_stores

# One process generates and writes about 70 sets/s at N from 64 to 128, most of it Zarr's writes (1,800 sets in
# 12.7 s with 2 processes); auto workers start a pool only for more work than POOL_WORTH_SECONDS (as the built-in
# generator does): a pool's start costs seconds, and a script must build the data set under its __main__ guard to
# start one (processes.check_main_guard).
SECONDS_PER_SET_AT_128 = 1 / 70
GENERATION_FILE = "generation.json"  # written last: a folder without it is not a finished generation
# Bump when a generator's draws change (the same settings would give other sets): older folders are then not reused.
# 2: destroyed_ambiguous sets differ from their sprinkling; 3: realised defects recorded; 4: destroyed sets record
# which relations changed (relation_labels)
GENERATOR_VERSION = 4
# The kinds whose exact defect size each setting gives (catalogue.DEFECT_SIZE_ARGUMENTS).
DESTROYED_KINDS = frozenset(kind for kind, argument in DEFECT_SIZE_ARGUMENTS.items() if argument == "changes")
MERGED_KINDS = frozenset(kind for kind, argument in DEFECT_SIZE_ARGUMENTS.items() if argument == "block_elements")
# The fewest elements a set may have: a layered set draws up to 20 layers (QuantumGrav.jl's default) and needs more
# elements than layers.
SMALLEST_N = 21


def generation_settings(kinds: Sequence[str], num_per_kind: int, n_min: int, n_max: int, seed: int,
                        dimension: int = 2, changed_relations: Sequence[int] | None = None,
                        block_sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """The checked settings that determine the sets, as JSON's types (their hash names the folder)."""
    check_kinds(kinds)
    for name, value, least in (("num_per_kind", num_per_kind, 1), ("seed", seed, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n_min, n_max)) or not SMALLEST_N <= n_min <= n_max:
        raise ValueError(f"n_min, n_max: expected integers with {SMALLEST_N} <= n_min <= n_max (a layered set has up "
                         f"to 20 layers and more elements than layers; QuantumGrav.jl's default: "
                         f"{DEFAULT_N_RANGE[0]} and {DEFAULT_N_RANGE[1]}), got n_min={n_min!r}, n_max={n_max!r}")
    for kind in kinds:
        generator_options(kind, dimension)
    sizes = {"changed_relations": check_defect_sizes("changed_relations", changed_relations, kinds, DESTROYED_KINDS,
                                                     1, n_min * (n_min - 1) // 2, "the pairs of n_min elements"),
             "block_sizes": check_defect_sizes("block_sizes", block_sizes, kinds, MERGED_KINDS, MIN_BLOCK_SIZE,
                                               n_min - 1, "n_min - 1: the sprinkling keeps one element")}
    return {"kinds": list(kinds), "num_per_kind": num_per_kind, "n_min": n_min, "n_max": n_max, "seed": seed,
            "dimension": dimension, **sizes, "block_size": BLOCK_SIZE, "generator_version": GENERATOR_VERSION}


def check_defect_sizes(name: str, sizes: Sequence[int] | None, kinds: Sequence[str], applies_to: frozenset[str],
                       least: int, most: int, why_most: str) -> list[int] | None:
    """``sizes`` as a list, checked: distinct integers in [least, most], for settings that have a kind to apply
    them to."""
    if sizes is None:
        return None
    if (isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes
            or not all(isinstance(size, int) and not isinstance(size, bool) and least <= size <= most
                       for size in sizes) or len(set(sizes)) != len(sizes)):
        raise ValueError(f"{name}: expected a list of distinct integers from {least} to {most} ({why_most}), "
                         f"or null, got {sizes!r}")
    if not applies_to & set(kinds):
        raise ValueError(f"{name}: applies to {' and '.join(sorted(applies_to))} sets, and kinds has none; add one "
                         f"of them to kinds or leave {name} out")
    return list(sizes)


def defect_sizes_by_kind(settings: dict[str, Any]) -> dict[str, list[int]]:
    """The exact defect sizes each kind's sets take in turn, from the settings."""
    by_kind = {}
    for name, kinds in (("changed_relations", DESTROYED_KINDS), ("block_sizes", MERGED_KINDS)):
        if settings[name] is not None:
            by_kind.update({kind: settings[name] for kind in kinds & set(settings["kinds"])})
    return by_kind


def generated_folder(path: str | os.PathLike, settings: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    return Path(path).expanduser() / f"kinds_{key}"


def ensure_generated(path: str | os.PathLike, settings: dict[str, Any], workers: int) -> Path:
    """The folder of stores for ``settings`` under ``path``, generated first if it is not there. It is written
    under a temporary name and renamed when whole, so a killed generation leaves no folder that looks finished,
    and two processes that generate it at once (the same sets) leave one."""
    folder = generated_folder(path, settings)
    if (folder / GENERATION_FILE).is_file():
        return folder
    partial = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        write_kind_stores(partial, settings["kinds"], settings["num_per_kind"], settings["seed"],
                          (settings["n_min"], settings["n_max"]), workers, settings["dimension"],
                          defect_sizes_by_kind(settings), caller="KindsDataset")
        record = {**settings, "written_by": f"QuantumGrav {__version__}"}
        atomic_write_text(partial / GENERATION_FILE, json.dumps(record, indent=1) + "\n")
        try:
            partial.rename(folder)
        except OSError:
            if not (folder / GENERATION_FILE).is_file():  # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def auto_workers(settings: dict[str, Any]) -> int:
    """1 for sets one process makes in under ``POOL_WORTH_SECONDS`` (by estimate), else this process's cores."""
    mean_n = (settings["n_min"] + settings["n_max"]) / 2
    estimate = len(settings["kinds"]) * settings["num_per_kind"] * SECONDS_PER_SET_AT_128 * (mean_n / 128) ** 2
    return cores_per_process() if estimate > POOL_WORTH_SECONDS else 1


class KindsDataset(QuantumGravJLDataset):
    """QuantumGrav.jl's kinds (``kinds``, all nine by default), ``num_per_kind`` sets of each with an element count
    drawn uniformly from [n_min, n_max] as QuantumGrav.jl draws it, generated here and cached as its stores.

    * ``path``: the folder under which the stores are kept, in a subfolder named by a hash of the settings
      (``generated_folder``); the same settings reuse it, other settings generate another.
    * ``target``: ``manifold_like`` (upstream's binary task: polynomial and complex_topology are manifold-like)
      or ``cset_type`` (the kind, the classes ordered by QuantumGrav.jl's codes), or ``inserted_block`` (per element:
      inside a merged set's inserted block or not, learned as ``node_binary``: ``configs/inserted_block.yaml``).
    * ``dimension``: 2 (QuantumGrav.jl's factory), 3 or 4: the spacetime dimension of the sprinklings of
      polynomial, destroyed, merged and their ambiguous ends. grid stays a 2D lattice, layered and random have
      none, and complex_topology is 2D only (leave it out of ``kinds`` for 3 and 4).
    * ``changed_relations``: null (QuantumGrav.jl's flip fractions), or a list of counts k that the destroyed
      kinds' sets take in turn: set i's closed order differs from its sprinkling in exactly k_(i mod len)
      relations (``destroyed.destroy_exactly``).
    * ``block_sizes``: null (QuantumGrav.jl's block fractions), or a list of sizes m that the merged kinds' sets
      take in turn: set i's inserted block has exactly m_(i mod len) elements.
    * ``edges``, ``cache``, ``cache_dir``, ``transform``: as ``QuantumGravJLDataset``.
    * ``workers``: processes that generate missing stores (None: this process's share of the cores, or 1 for sets
      made in seconds, ``auto_workers``).

    ``describe(i)`` gives item i's kind and the drawn parameters that make it hard (flip fraction, inserted block,
    cuts, lattice, ...) and the realised defect (``changed_relations`` of destroyed sets, ``block_size`` of merged
    ones). The same settings give the same sets on every machine, whatever ``workers``.
    """

    def __init__(self, path: str | os.PathLike = "data/kinds", *, kinds: Sequence[str] = tuple(GENERATORS),
                 num_per_kind: int = 1000, n_min: int = DEFAULT_N_RANGE[0], n_max: int = DEFAULT_N_RANGE[1],
                 seed: int = 0, dimension: int = 2, changed_relations: Sequence[int] | None = None,
                 block_sizes: Sequence[int] | None = None, target: str = "manifold_like", edges: str = "links",
                 cache: bool = True, cache_dir: str | os.PathLike | None = None, workers: int | None = None,
                 transform: Callable | None = None):
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers: expected a positive integer or null (this process's cores), got {workers!r}")
        self.settings = generation_settings(list(kinds), num_per_kind, n_min, n_max, seed, dimension,
                                            changed_relations, block_sizes)
        self.folder = ensure_generated(path, self.settings, workers or auto_workers(self.settings))
        super().__init__(self.folder, target=target, edges=edges, cache=cache, cache_dir=cache_dir,
                         transform=transform)
