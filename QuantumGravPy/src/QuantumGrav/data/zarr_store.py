"""QuantumGrav.jl's Zarr stores as a lazy PyG dataset (needs the extra: ``pip install 'QuantumGrav[zarr]'``).

The layout, read from the Julia sources in github.com/ssciwr/QuantumGrav (``QuantumGrav.jl/``):

* ``src/preparation.jl`` (``prepare_dataproduction``, ``produce_data``): one directory store
  ``{cset_type}_{pid}_{datetime}.zarr`` per run, hence per causal-set type, in the config's
  ``output`` folder (next to a YAML copy of the config and the producing ``.jl`` file). Its root
  group holds one group ``cset_{i}`` per causal set, i = 1..num_datapoints.
* ``examples/produce_data.jl`` (``make_cset_data``): each group holds ``adj`` =
  ``make_adj(cset, type=Matrix, eltype=UInt8)``, ``manifold_like`` (Bool: polynomial or
  complex_topology) and ``cset_type``, an Int64 code of ``cset_type_encoder`` (``JULIA_CSET_TYPES``; stores
  numbered by ``src/cset_factories.jl``'s ``encode_csettype`` instead are read with ``cset_type_encoding``, and
  every code is checked against the kind in its store's name: ``stores.kind_codes``). A group may hold its links
  alone instead of ``adj``: ``linkmat``, the transitive reduction in the same layout (as upstream's own notebooks
  read it, with the link degrees ``in_degrees_link`` and ``out_degrees_link``); its relation is then the
  transitive closure of the links (``stores.graphs.relation_of_links``).
* ``src/save_data.jl`` (``dict_to_zarr``, ``write_arraylike_to_zarr``): every value is an array,
  scalars as one-element arrays, Blosc-compressed (lz4, clevel 9, bit-shuffle), Zarr format 2.
* ``src/graph_utils.jl`` (``make_adj``): ``adj = transpose(hcat(c.future_relations...))``, so in
  Julia ``adj[i, j] == 1`` iff element i precedes j. Zarr.jl writes an array's column-major bytes
  and declares them C order with the dimensions reversed (Zarr.jl's ``metadata.jl``; format 3 alike,
  ``metadata3.jl``), so numpy reads the *transpose*: ``stored[j, i] == 1`` iff i precedes j, and
  our causal matrix is ``R = stored.T``.

Non-sprinkled sets need not be in a natural labelling (``R`` need not be upper triangular): the
features are computed on a natural relabelling and mapped back, so node k of an item is element
k + 1 of the Julia set. Features, edges and the order invariants (``invariants``, the default model's
graph features and the baselines' input) are those of ``QuantumGrav.data.dataset.CausalSetDataset``, so a
sprinkling read from a store gives the graph the generator gives for the same causal matrix.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data, Dataset

from .invariants import NODE_FEATURES
from .orders import transitive_closure, transitive_reduction
from .dataset import MANIFOLD_LIKE_NAMES, TARGET_TASKS, VALID_EDGES
from .node_targets import (MISSING_LABELS, NODE_TARGET_CLASS_NAMES, NODE_TARGET_TASKS, node_target,
                           read_node_labels, unlabelled_stores)
from .relation_targets import (RELATION_LABELS_ARRAY, RELATION_TARGET_CLASS_NAMES, RELATION_TARGET_TASKS,
                               pair_target, relation_labels_missing, unlabelled_relation_stores)
from .stores.graphs import (LINK_DEGREE_ARRAYS, NOT_PARTIAL_ORDERS, ORDER_CLOSED, ORDER_CYCLE, ORDER_OK,
                            NotAPartialOrder, causal_matrix, describe_order_repairs, graph_tensors, order_error,
                            relation_of_links)
from .stores.kind_codes import ENCODINGS, ITEM_CODES, KIND_NAMES, PRODUCE_DATA, StoreKinds
from .shards import ShardFiles
from .stores.cache_files import (ENTRY_CONTENTS, announce_earlier_entries, feature_cache_dir, graph_of_entry,
                                 group_cache_key, write_entry)
from .stores.layout import find_stores, import_zarr, list_groups, read_array, read_group, read_scalar
from .stores.limits import DEFAULT_MAX_ELEMENTS, check_max_elements, checked_size, store_error, usable_memory
from ..common.errors import UserError
from ..common.logging_utils import get_logger, rank_zero_warn
from ..common.processes import use_one_thread, worker_context

logger = get_logger("zarr_store")

# cset_type_encoder in QuantumGrav.jl/examples/produce_data.jl (code -> name), and code 10 (``stores.kind_codes``): the
# codes items carry as ``julia_cset_type``, whichever numbering the store was written in.
JULIA_CSET_TYPES: dict[int, str] = ENCODINGS[PRODUCE_DATA]
VALID_TARGETS: tuple[str, ...] = ("manifold_like", "cset_type", *NODE_TARGET_TASKS, *RELATION_TARGET_TASKS)
DEFAULT_TARGET, DEFAULT_EDGES = "manifold_like", "links"  # as upstream trains
# The classes of the per-element and per-pair targets (node_targets, relation_targets: 1 inside the defect).
LOCATED_CLASS_NAMES: dict[str, list[str]] = {**NODE_TARGET_CLASS_NAMES, **RELATION_TARGET_CLASS_NAMES}
def _check_choices(**given: tuple[str, Sequence[str]]) -> None:
    """One UserError for the first keyword argument whose value is not among its choices."""
    for name, (value, choices) in given.items():
        if value not in choices:
            raise UserError(f"{name}: expected one of {choices}, got {value!r}")


def unlabelled_of_target(target: str, first_groups: Sequence[Path], kinds: Sequence[str],
                         missing_labels: str) -> list[str]:
    """The stores whose first set lacks the per-element or per-pair labels ``target`` asks for (``node_targets``,
    ``relation_targets``; none for a per-set target), or under ``missing_labels`` ``refuse`` one UserError."""
    return [*unlabelled_stores(target, first_groups, kinds, missing_labels),
            *unlabelled_relation_stores(target, first_groups, kinds, missing_labels)]


def announce_links(stores: Sequence[Path], arrays_and_sizes: list[list[tuple[str, int]]]) -> None:
    """One log line, once per process and on rank 0 only, naming the stores whose sets hold their links alone
    (``linkmat``)."""
    names = [store.name for store, groups in zip(stores, arrays_and_sizes)
             if any(array == "linkmat" for array, _ in groups)]
    if not names:
        return
    more = f" and {len(names) - 3} more stores" if len(names) > 3 else ""
    line = (f"QuantumGrav.jl data: the sets of {', '.join(names[:3])}{more} hold their links alone ('linkmat', "
            f"no 'adj'): each causal relation is derived as the transitive closure of the links")
    rank_zero_warn(logger, line)  # a warning: the trainer builds its data before its log has an INFO console


class QuantumGravJLDataset(Dataset):
    """Causal sets from QuantumGrav.jl's Zarr stores as PyG graphs, read lazily item by item.

    * ``path``: one store or a folder of stores (e.g. the ``output`` folder of produce_data runs,
      one store per causal-set type), or a list of them; items are the stores' ``cset_{i}`` groups, the
      stores of each path by name, the paths in the order given.
    * ``target="manifold_like"``: y = 1 for manifold-like sets, 0 otherwise (as upstream trains).
      ``target="cset_type"``: y indexes ``class_names``, the ``JULIA_CSET_TYPES`` names given in
      ``cset_types`` or, by default, those found in the first group of each store (one type per
      store is how produce_data writes them), ordered by code. ``target="inserted_block"``: y holds one 0/1
      per element, 1 inside a merged set's inserted block (``node_targets``), learned as ``node_binary``.
      ``"toggled_relations"``: one 0/1 per pair and its input state ``pair_relation`` (``relation_binary``).
    * ``cset_type_encoding``: the numbering of the stores' ``cset_type`` codes, ``"produce_data"`` (None: the
      default) or ``"encode_csettype"``; each set's kind is checked against its store's name (``stores.kind_codes``).
    * ``edges``: ``"links"`` (transitive reduction) or ``"relations"``, past to future.
    * ``cache=True``: features, edges, invariants and labels (the per-element ones too) are computed once per causal
      set and cached in the data cache (``shards``: a shard per set) in a folder next to each store
      (``<store>.qg_features``), keyed by the group's stored bytes, the edges and the feature version; where that
      folder cannot be written, under ``cache_dir``. ``cache=False`` computes them on the fly at every read.
    * ``max_elements``: the most elements a set may have. Every group's ``adj`` is judged by its declared shape before
      anything is read (``stores.limits``: also against the memory this process may use); a set too large is one
      UserError naming store, group and shape, with nothing written.
    * ``not_partial_orders``: a set whose ``adj`` is not a strict partial order, transitively closed (QuantumGrav.jl's
      ``complex_topology`` may miss implied relations) is ``"refuse"``-d (one UserError, the default), ``"close"``-d
      (its transitive closure read; a cycle is refused) or ``"skip"``-ped. ``close`` and ``skip`` read (and cache)
      every set at construction, so that ``order_repairs`` counts them before training; a warning names them.
    * ``missing_labels``: per-element labels that a set's kind should have but its store lacks (QuantumGrav.jl's):
      ``"refuse"`` (the default) or ``"unknown"``, y of NaN, for ``evaluate`` to score (``node_targets``); the
      stores whose first set lacks them are ``unlabelled_stores``.

    Nothing is read at construction but the folder listings, each group's ``adj`` (or ``linkmat``: the links alone,
    whose transitive closure is then read, as one log line says) metadata and the first group of each store (checked,
    so that a wrong path or format fails before training). Stores are opened lazily in each process (DataLoader
    workers included). Each item is ``Data(x, edge_index, y, invariants)``, the invariants a float row [1, K]
    (``causal_sets.INVARIANT_NAMES``) as the generator's items carry, and ``julia_cset_type``, the set's kind as a
    code of ``JULIA_CSET_TYPES`` (whichever numbering the store has): what kind of set it is, whatever the target.
    """

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike], *, target: str = DEFAULT_TARGET, edges: str = DEFAULT_EDGES,
                 cache: bool = True, cache_dir: str | os.PathLike | None = None,
                 cset_types: Sequence[str] | None = None, max_elements: int = DEFAULT_MAX_ELEMENTS,
                 not_partial_orders: str = "refuse", missing_labels: str = "refuse",
                 cset_type_encoding: str | None = None, transform: Callable | None = None):
        import_zarr()
        _check_choices(target=(target, VALID_TARGETS), edges=(edges, VALID_EDGES), not_partial_orders=(
            not_partial_orders, NOT_PARTIAL_ORDERS), missing_labels=(missing_labels, MISSING_LABELS))
        self.target, self.edges, self.cache, self.missing_labels = target, edges, bool(cache), missing_labels
        self.max_elements, self.not_partial_orders = check_max_elements(max_elements), not_partial_orders
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        self.stores = list(dict.fromkeys(store for each in paths for store in find_stores(each)))
        self.groups = [list_groups(store) for store in self.stores]
        # Every set's size as its adj declares it, judged before anything is read or written: a hostile or oversized
        # store is one line here, not a 37 GiB allocation later.
        memory = usable_memory()
        arrays_and_sizes = [[checked_size(store, group, self.max_elements, memory) for group in groups]
                            for store, groups in zip(self.stores, self.groups)]
        self._sizes = [[size for _, size in store_sizes] for store_sizes in arrays_and_sizes]
        self._handles, self._handles_pid = {}, os.getpid()  # this process's open stores (``_open``)
        # The kind each store's name gives, and the first set's code checked against it, before anything is written.
        self.kinds = StoreKinds(self.stores, cset_type_encoding)
        for k, groups in enumerate(self.groups):
            root = self._open(k)
            self.kinds.kind(k, groups[0], read_scalar(read_array(root, self.stores[k], groups[0], "cset_type"),
                                                      "cset_type", self.stores[k], groups[0]))
        self._cache_dirs = [feature_cache_dir(store, cache_dir) for store in self.stores] if self.cache else []
        self._entries = ShardFiles(max_open=4)  # a set's entry is read once an epoch: few worth keeping open
        announce_earlier_entries(self._cache_dirs)
        # The first group of each store is read whole (order checked, features cached), so that a wrong format
        # fails here, before training.
        firsts = [self._stored_graph(k, groups[0]) for k, groups in enumerate(self.groups)]
        first_kinds = [self.kinds.kind(k, self.groups[k][0], int(graph["labels"][1])) for k, graph in enumerate(firsts)]
        self.unlabelled_stores = unlabelled_of_target(target, [store / groups[0] for store, groups in zip(
            self.stores, self.groups)], first_kinds, missing_labels)
        announce_links(self.stores, arrays_and_sizes)
        self.order_repairs: dict[str, list[str]] = {"closed": [], "skipped": []}
        if not_partial_orders == "refuse":
            for k, graph in enumerate(firsts):
                self._allowed(graph, k, self.groups[k][0])
        else:
            self._sort_out_orders()
        self._offsets = np.cumsum([0] + [len(groups) for groups in self.groups])
        if self._offsets[-1] == 0:
            raise UserError(f"QuantumGrav.jl data {', '.join(str(store) for store in self.stores)}: every set was left "
                            f"out (not_partial_orders: skip): none is a strict partial order")
        if self.order_repairs_line():
            logger.warning(self.order_repairs_line())
        # The types of the stores, by code: each store's first group's (produce_data writes one type per store).
        self.found_cset_types = sorted(set(first_kinds), key=ITEM_CODES.__getitem__)
        self._cset_types = self._choose_cset_types(cset_types, self.found_cset_types)
        super().__init__(root=None, transform=transform)

    # ------------------------------------------------------------------ labels
    @staticmethod
    def _choose_cset_types(cset_types: Sequence[str] | None, found: list[str]) -> list[str]:
        if cset_types is None:
            return found
        unknown = [name for name in cset_types if name not in KIND_NAMES]
        if unknown or not cset_types or len(set(cset_types)) != len(cset_types):
            raise UserError(f"cset_types: expected distinct names from {list(KIND_NAMES)}, "
                            f"got {list(cset_types)!r}")
        return list(cset_types)

    @property
    def task(self) -> str:
        """How ``y`` is learned (``task.type: auto`` reads it): as the generator's targets of the same name."""
        return NODE_TARGET_TASKS.get(self.target) or RELATION_TARGET_TASKS.get(self.target) or TARGET_TASKS[self.target]

    @property
    def class_names(self) -> list[str]:
        return list(LOCATED_CLASS_NAMES.get(self.target)
                    or (MANIFOLD_LIKE_NAMES if self.target == "manifold_like" else self._cset_types))

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_node_features(self) -> int:
        return len(NODE_FEATURES)

    # ------------------------------------------------------------------ reading
    def len(self) -> int:
        return int(self._offsets[-1])

    def _open(self, store_index: int):
        """The root group of a store, opened once per process (handles are not shared across a fork)."""
        if self._handles_pid != os.getpid():
            self._handles, self._handles_pid = {}, os.getpid()
        if store_index not in self._handles:
            store = self.stores[store_index]
            zarr_format = 2 if (store / ".zgroup").is_file() else 3
            self._handles[store_index] = import_zarr().open_group(str(store), mode="r", zarr_format=zarr_format)
        return self._handles[store_index]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handles": {}}  # open stores stay in their process

    def _read_arrays(self, store_index: int, group: str) -> dict[str, np.ndarray]:
        return read_group(self._open(store_index), self.stores[store_index], group)

    def _read_checked(self, store_index: int, group: str) -> tuple[np.ndarray, bool, int]:
        """The causal matrix, manifold_like and cset_type code of one group, each checked: the relation is ``adj``,
        or the transitive closure of ``linkmat`` (``relation_of_links``)."""
        store, arrays = self.stores[store_index], self._read_arrays(store_index, group)
        manifold_like = read_scalar(arrays["manifold_like"], "manifold_like", store, group)
        code = read_scalar(arrays["cset_type"], "cset_type", store, group)
        if manifold_like not in (0, 1):
            raise store_error(store, group, f"'manifold_like' is {manifold_like!r}; expected a Bool")
        self.kinds.kind(store_index, group, code)
        if "adj" in arrays:
            return causal_matrix(arrays["adj"], store, group), bool(manifold_like), code
        degrees = {name: arrays[name] for name in LINK_DEGREE_ARRAYS if name in arrays}
        return relation_of_links(arrays["linkmat"], degrees, store, group), bool(manifold_like), code

    def _read_graph(self, store_index: int, group: str) -> dict[str, torch.Tensor]:
        """The group's graph, whatever ``not_partial_orders`` says (``_allowed`` judges it): the graph of the
        closure of a relation that misses implied relations (``order_problem`` ORDER_CLOSED), only the labels of a
        relation with a cycle (ORDER_CYCLE), so that one cached file serves every setting."""
        R, manifold_like, code = self._read_checked(store_index, group)
        store, labels = self.stores[store_index], torch.tensor([int(manifold_like), code])
        try:
            x, edge_index, invariants = graph_tensors(R, self.edges, store, group)
            problem = ORDER_OK
        except NotAPartialOrder as err:
            if err.cycle:
                return {"labels": labels, "order_problem": torch.tensor(ORDER_CYCLE)}
            x, edge_index, invariants = graph_tensors(transitive_closure(R), self.edges, store, group)
            problem = ORDER_CLOSED
        node_labels = read_node_labels(self._open(store_index)[group], len(R),
                                       lambda problem: store_error(store, group, problem))
        return {"x": x, "edge_index": edge_index, "invariants": invariants, "labels": labels,
                "node_labels": node_labels, "order_problem": torch.tensor(problem)}

    def _allowed(self, graph: dict[str, torch.Tensor], store_index: int, group: str) -> dict[str, torch.Tensor]:
        """``graph`` if ``not_partial_orders`` lets it be read (a closure's under ``close``), else NotAPartialOrder."""
        problem = int(graph.get("order_problem", ORDER_OK))
        if problem == ORDER_OK or (problem == ORDER_CLOSED and self.not_partial_orders == "close"):
            return graph
        raise order_error(self.stores[store_index], group, cycle=problem == ORDER_CYCLE)

    def _sort_out_orders(self) -> None:
        """Under ``close`` or ``skip``: every set read (and cached), those that are not partial orders counted in
        ``order_repairs``, closed or left out; a cycle under ``close`` is refused."""
        for k, store in enumerate(self.stores):
            kept = []
            for group, size in zip(self.groups[k], self._sizes[k]):
                problem = int(self._stored_graph(k, group).get("order_problem", ORDER_OK))
                if problem == ORDER_CYCLE and self.not_partial_orders == "close":
                    raise order_error(store, group, cycle=True)
                if problem != ORDER_OK:
                    self.order_repairs["skipped" if self.not_partial_orders == "skip" else "closed"].append(
                        f"{store.name}/{group}")
                if problem == ORDER_OK or self.not_partial_orders == "close":
                    kept.append((group, size))
            self.groups[k], self._sizes[k] = [group for group, _ in kept], [size for _, size in kept]

    def order_repairs_line(self) -> str | None:
        """One line saying how many sets were closed or left out (``not_partial_orders``), naming the first few."""
        return describe_order_repairs(self.order_repairs, self.len(), self.not_partial_orders)

    def _label(self, store_index: int, group: str, manifold_like: int, kind: str) -> int:
        if self.target == "manifold_like":
            return manifold_like
        if kind not in self._cset_types:
            raise store_error(self.stores[store_index], group,
                              f"cset_type '{kind}' (code {ITEM_CODES[kind]}) is not among the classes "
                              f"{self._cset_types}; pass every type of the data in cset_types")
        return self._cset_types.index(kind)

    def _locate(self, idx: int) -> tuple[int, str]:
        """The store (its index) and group of item ``idx``."""
        store_index = int(np.searchsorted(self._offsets, idx, side="right")) - 1
        return store_index, self.groups[store_index][idx - self._offsets[store_index]]

    def store_and_group(self, idx: int) -> tuple[str, str]:
        """Where item ``idx`` is stored: its store's folder name and its group (``cset_{i}``)."""
        store_index, group = self._locate(idx)
        return self.stores[store_index].name, group

    def get(self, idx: int) -> Data:
        store_index, group = self._locate(idx)
        graph = self._graph(store_index, group)
        kind, extra = self.kinds.kind(store_index, group, int(graph["labels"][1])), {}
        if self.target in NODE_TARGET_TASKS:
            y = node_target(graph["node_labels"], self.target, kind, self.stores[store_index] / group,
                            self.missing_labels)
        elif self.target in RELATION_TARGET_TASKS:
            y, extra["pair_relation"], extra["violation_part"] = self._pair_target(store_index, group, graph, kind)
        else:
            y = torch.tensor([self._label(store_index, group, int(graph["labels"][0]), kind)], dtype=torch.long)
        return Data(x=graph["x"], edge_index=graph["edge_index"], y=y, invariants=graph["invariants"],
                    julia_cset_type=torch.tensor([ITEM_CODES[kind]]), num_nodes=graph["x"].shape[0], **extra)

    def _pair_target(self, store_index: int, group: str, graph: dict[str, Any], kind: str) -> tuple[torch.Tensor, ...]:
        """The group's per-pair labels and states (read, not cached) and violating parts: ``pair_target``."""
        R, _, _ = self._read_checked(store_index, group)
        R = transitive_closure(R) if int(graph["order_problem"]) == ORDER_CLOSED else R  # what the graph was built from
        unknown = self.missing_labels == "unknown" and relation_labels_missing(
            self.target, kind, self.stores[store_index] / group)
        return pair_target(R, graph["edge_index"] if self.edges == "links" else None, self._open(store_index)[group],
                           lambda problem: store_error(self.stores[store_index], group, problem), unknown)

    def describe(self, idx: int) -> dict[str, Any]:
        """Where item ``idx`` comes from and what it is: its store's name, group and QuantumGrav.jl kind, and the
        attributes our generator records with each set (the drawn parameters that make it hard to recognise,
        ``data.kinds``); produce_data's own stores have none."""
        store_index, group = self._locate(idx)
        kind = self.kinds.kind(store_index, group, int(self._graph(store_index, group)["labels"][1]))
        attributes = dict(self._open(store_index)[group].attrs)
        return {"store": self.stores[store_index].name, "group": group, "kind": kind, **attributes}

    # ------------------------------------------------------------------ feature cache
    def _stored_graph(self, store_index: int, group: str) -> dict[str, torch.Tensor]:
        return self._cached_graph(store_index, group) if self.cache else self._read_graph(store_index, group)

    def _graph(self, store_index: int, group: str) -> dict[str, torch.Tensor]:
        return self._allowed(self._stored_graph(store_index, group), store_index, group)

    def element_counts(self) -> np.ndarray:
        """Each item's number of elements, as its ``adj`` declares it (nothing is read)."""
        return np.array([size for sizes in self._sizes for size in sizes], dtype=np.int64)

    def _cached_graph(self, store_index: int, group: str) -> dict[str, torch.Tensor]:
        """The group's graph from its entry in the data cache (``data.shards``: one shard per set, named by the
        group's content), computed and written first where it is missing. Several processes (DataLoader workers, the
        ranks of a job, two jobs) may compute the same group at once: each writes the same bytes under a temporary
        name and renames it, so a reader sees no file or a whole one. An entry that fails its checks (damaged on
        disk, not written by this code) is computed again and replaced, with a warning."""
        store = self.stores[store_index]
        path = self._cache_dirs[store_index] / f"{group_cache_key(store / group, self.edges)}.shard"
        entry = self._entries.read(path, 0, lambda: write_entry(path, self._read_graph(store_index, group)),
                                   f"QuantumGrav.jl store {store}, group {group}", ENTRY_CONTENTS)
        return graph_of_entry(entry)

    def build_cache(self, *, workers: int = 1, rank: int = 0, world_size: int = 1) -> int:
        """Compute and cache the graphs of items ``rank``, ``rank + world_size``, ... (this process's share when
        ``world_size`` processes build one cache, e.g. the tasks of a SLURM job) with ``workers`` processes;
        items already cached are read, not computed. Returns the number of items of the share. Sharing out
        needs no communication: a group that two processes compute is written whole by each (same bytes)."""
        if not self.cache:
            raise UserError("build_cache: this dataset was made with cache=False; make it with cache=True")
        share = range(rank, len(self), world_size)
        if workers <= 1:
            for index in share:
                self._graph(*self._locate(index))
            return len(share)
        # Forked from a fork server that imported the package once (not from the caller, which may hold threads
        # or CUDA); each worker computes whole items and writes their files itself.
        with ProcessPoolExecutor(min(workers, len(share)), mp_context=worker_context(),
                                 initializer=use_one_thread) as pool:  # one core per worker
            for _ in pool.map(self._build_one, share, chunksize=4):
                pass
        return len(share)

    def _build_one(self, index: int) -> None:
        self._graph(*self._locate(index))


def write_julia_store(path: str | os.PathLike, causal_matrices: Sequence[np.ndarray], cset_type_codes: Sequence[int],
                      manifold_like: Sequence[bool], *, zarr_format: int = 2, links_only: bool = False) -> Path:
    """Write causal sets with zarr-python exactly as QuantumGrav.jl's produce_data writes them (for tests,
    examples and benchmarks): groups ``cset_1``.. with ``adj`` (UInt8, stored as Zarr.jl stores Julia's
    ``make_adj``: the transpose of R), ``manifold_like`` (Bool) and ``cset_type`` (Int64) as one-element
    arrays, Blosc lz4 clevel 9 bit-shuffle and chunks as save_data.jl's defaults (``default_chunks``:
    1000 x 1000 for UInt8 matrices), Zarr format 2 as Zarr.jl 0.9 (QuantumGrav.jl's compat) writes it.
    ``zarr_format=3`` writes what a newer Zarr.jl writes in format 3 (dimensions also reversed, C order).
    ``links_only``: each group holds the links instead of ``adj`` (``write_julia_group``)."""
    root = import_zarr().open_group(str(path), mode="w", zarr_format=zarr_format)
    for i, (R, code, manifold) in enumerate(zip(causal_matrices, cset_type_codes, manifold_like, strict=True), 1):
        write_julia_group(root, i, R, code, manifold, links_only=links_only)
    return Path(path)


def write_julia_group(root: Any, index: int, causal_matrix: np.ndarray, cset_type_code: int, manifold_like: bool,
                      *, attributes: dict[str, Any] | None = None, node_labels: np.ndarray | None = None,
                      relation_labels: np.ndarray | None = None, links_only: bool = False) -> None:
    """Group ``cset_<index>`` of an open store, as ``write_julia_store`` writes it; ``attributes`` (the group's
    JSON attributes), ``node_labels`` (an array of one 0/1 per element) and ``relation_labels`` (an N x N 0/1
    matrix like ``causal_matrix``, written in ``adj``'s layout: transposed) are what our generator adds, and
    readers of produce_data's keys pass over them. ``links_only``: instead of ``adj``, the links of the (closed)
    ``causal_matrix`` as ``linkmat`` in ``adj``'s layout, with their degrees ``in_degrees_link`` and
    ``out_degrees_link`` (Int64), the keys upstream's own notebooks read."""
    zarr_format = root.metadata.zarr_format
    if zarr_format == 2:
        from numcodecs import Blosc
        blosc = Blosc(cname="lz4", clevel=9, shuffle=Blosc.BITSHUFFLE)
    else:
        blosc = import_zarr().codecs.BloscCodec(cname="lz4", clevel=9, shuffle="bitshuffle")
    group = root.create_group(f"cset_{index}", attributes=attributes or {})
    if links_only:
        links = transitive_reduction(np.asarray(causal_matrix, dtype=bool))
        values = {"linkmat": links.astype(np.uint8).T, "in_degrees_link": links.sum(axis=0).astype("<i8"),
                  "out_degrees_link": links.sum(axis=1).astype("<i8")}
    else:
        values = {"adj": np.asarray(causal_matrix, dtype=np.uint8).T}
    values.update(manifold_like=np.array([manifold_like], dtype=bool), cset_type=np.array([cset_type_code], dtype="<i8"))
    if node_labels is not None:
        values["node_labels"] = np.asarray(node_labels, dtype=np.uint8)
    if relation_labels is not None:
        values[RELATION_LABELS_ARRAY] = np.asarray(relation_labels, dtype=np.uint8).T
    for name, value in values.items():
        chunks = tuple(min(size, 1000) for size in value.shape)
        array = group.create_array(name, shape=value.shape, chunks=chunks, dtype=value.dtype,
                                   compressors=blosc, fill_value=None if zarr_format == 2 else 0)
        array[...] = value
