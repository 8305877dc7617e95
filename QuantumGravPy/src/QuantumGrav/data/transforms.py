"""What the models made for orders read besides ``x`` and the links: every relation with the size of its interval,
optionally the unrelated pairs, a random-walk positional encoding, and per-set features of the strongest rival,
derived from each item's edges by one transform (``OrderStructure``) and kept for the later reads.

Message passing along the links cannot count the elements between two related elements (that needs triangles) nor
tell a link from a longer relation; the interval size |I(x, y)| is one product of the causal matrix with itself
(``orders.elements_between``), so it is computed here once per set and handed to the models as an attribute:

* ``relation_index`` [2, R]: every pair x < y (past to future; PyG offsets it per set like ``edge_index``);
  ``relation_interval`` [R]: |I(x, y)|, the elements between them (0 exactly for the links);
* ``incomparable_index`` [2, U] (``incomparable=True``): the unrelated pairs, each once (lower label first);
* ``order_pe`` [N, k] (``random_walk_steps=k``): PyG's ``AddRandomWalkPE`` on the symmetrised links, the return
  probabilities of 1..k steps (a sign-free encoding; the height, depth and cone sizes are already columns of ``x``,
  ``invariants.NODE_FEATURES``);
* ``set_features`` [1, F] (``set_features``, groups of ``SET_FEATURE_GROUPS``): the strongest rival's own per-set
  columns: the exact 2D-order test (``order_dimension``: the bit and the share of elements on a violation) and the
  field's graph observables (``graph_observables``). A model that reads them is a hybrid, and says so.

An item whose edges have a cycle is no causal set: one ``ValueError`` names it. Each set is derived once per process
and kept compactly (labels as int16/int32), keyed by its edges (a digest of ``edge_index``), so a dataset's
``transform`` gets it for every later epoch at the cost of a lookup: about 10 ms per set at N = 128 the first time.
``with_order_structure`` builds the dataset class it is handed (``data.kwargs.dataset``, e.g. ``KindsDataset``) with the
transform, for ``data.type``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddRandomWalkPE, BaseTransform

from ..config.roles import dataset_factory
from .derived_invariants import NotACausalSet, causal_matrix_of_edges
from .graph_observables import GRAPH_OBSERVABLE_NAMES, graph_observables
from .order_dimension import TWO_DIMENSION_FEATURES, two_dimension_features
from .orders import elements_between

SET_FEATURE_GROUPS: dict[str, tuple[str, ...]] = {"two_dimension": TWO_DIMENSION_FEATURES,
                                                  "graph_observables": GRAPH_OBSERVABLE_NAMES}
RIVAL_SET_FEATURES: tuple[str, ...] = ("two_dimension", "graph_observables")


def set_feature_names(groups: Sequence[str]) -> tuple[str, ...]:
    """The columns of ``set_features`` for ``groups`` (in their order), or a ValueError naming a group unknown."""
    unknown = [group for group in groups if group not in SET_FEATURE_GROUPS]
    if unknown or len(set(groups)) != len(groups):
        raise ValueError(f"set_features: expected distinct groups of {', '.join(SET_FEATURE_GROUPS)}, got "
                         f"{list(groups)!r}")
    return tuple(name for group in groups for name in SET_FEATURE_GROUPS[group])


def _compact(index: np.ndarray, num_nodes: int) -> np.ndarray:
    return index.astype(np.int16 if num_nodes < 2**15 else np.int32)


def order_structure(edge_index: torch.Tensor | np.ndarray, num_nodes: int, *, set_features: Sequence[str] = (),
                    incomparable: bool = False, random_walk_steps: int = 0) -> dict[str, np.ndarray]:
    """The attributes of ``OrderStructure`` for one set with past -> future ``edge_index`` (links or relations),
    as compact numpy arrays. Raises ``ValueError`` when the edges are not those of a partial order."""
    try:
        R = causal_matrix_of_edges(edge_index, num_nodes)
    except NotACausalSet as err:
        raise ValueError(f"OrderStructure: the item is not a causal set (a partial order): {err}; give edge_index "
                         f"past -> future along the links or relations of a partial order") from None
    between = elements_between(R)
    first, second = np.nonzero(R)
    out = {"relation_index": _compact(np.stack([first, second]), num_nodes),
           "relation_interval": between[first, second].astype(np.int32)}
    if incomparable:
        out["incomparable_index"] = _compact(np.stack(np.nonzero(np.triu(~(R | R.T), 1))), num_nodes)
    if random_walk_steps:
        links = np.stack(np.nonzero(R & (between == 0)))
        symmetric = torch.from_numpy(np.concatenate([links, links[::-1]], axis=1).copy()).long()
        walks = AddRandomWalkPE(random_walk_steps, attr_name="pe")(Data(edge_index=symmetric, num_nodes=num_nodes))
        out["order_pe"] = walks.pe.numpy().astype(np.float32)
    if set_features:
        columns = {"two_dimension": lambda: two_dimension_features(R),
                   "graph_observables": lambda: graph_observables(R, between)}
        out["set_features"] = np.concatenate([columns[group]() for group in set_features]).astype(np.float32)
    return out


class OrderStructure(BaseTransform):
    """A PyG transform giving each item the attributes of ``order_structure`` (see the module's docstring),
    derived once per set and process.

    Args:
        set_features: groups of ``SET_FEATURE_GROUPS`` for ``set_features`` ([] : none; the models then stay
            purely learned). ``RIVAL_SET_FEATURES``: the strongest rival's exact test and observables.
        incomparable: add ``incomparable_index``.
        random_walk_steps: k > 0 adds ``order_pe`` [N, k].
    """

    def __init__(self, set_features: Sequence[str] = (), incomparable: bool = False, random_walk_steps: int = 0):
        if isinstance(set_features, str):
            set_features = [set_features]
        self.feature_names = set_feature_names(list(set_features))
        if isinstance(random_walk_steps, bool) or not isinstance(random_walk_steps, int) or random_walk_steps < 0:
            raise ValueError(f"random_walk_steps: expected an integer >= 0, got {random_walk_steps!r}")
        self.options = {"set_features": tuple(set_features), "incomparable": bool(incomparable),
                        "random_walk_steps": random_walk_steps}
        self._derived: dict[bytes, dict[str, np.ndarray]] = {}

    def forward(self, data: Data) -> Data:
        num_nodes = int(data.num_nodes)
        edges = np.ascontiguousarray(data.edge_index.numpy(), dtype=np.int64)
        key = hashlib.blake2b(edges.tobytes() + num_nodes.to_bytes(8, "little"), digest_size=16).digest()
        if key not in self._derived:
            self._derived[key] = order_structure(edges, num_nodes, **self.options)
        for name, value in self._derived[key].items():
            tensor = torch.from_numpy(value)
            if name.endswith("_index"):
                tensor = tensor.long()
            elif name == "relation_interval":
                tensor = tensor.float()
            elif name == "set_features":
                tensor = tensor.reshape(1, -1)
            data[name] = tensor
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


@dataset_factory
def with_order_structure(dataset: type | None = None, order_structure: Mapping[str, Any] | None = None,
                         **kwargs: Any) -> Any:
    """``dataset(**kwargs, transform=OrderStructure(**order_structure))``: in a config, ``data.type: !pyobject
    QuantumGrav.data.transforms.with_order_structure`` with ``data.kwargs`` those of the dataset, the dataset class
    itself (``dataset: !pyobject QuantumGrav.data.kinds.KindsDataset`` for the nine kinds; any dataset class taking a
    PyG ``transform``) and ``order_structure: {set_features: [...], incomparable: ..., random_walk_steps: ...}``.
    The class is named, not defaulted: the datasets stand above the transforms that they apply."""
    if dataset is None:
        raise ValueError("dataset: with_order_structure needs the dataset class to wrap; add it to data.kwargs, "
                         "e.g. dataset: !pyobject QuantumGrav.data.kinds.KindsDataset")
    if "transform" in kwargs:
        raise ValueError("transform: with_order_structure sets the dataset's transform (OrderStructure); leave "
                         "transform out of data.kwargs")
    return dataset(**kwargs, transform=OrderStructure(**dict(order_structure or {})))
