"""Questions about each pair of elements of a causal set, read from the stores our generator writes (``data.kinds``).

``toggled_relations``: did the pair's relation change when the set was destroyed? A ``destroyed`` (or
``destroyed_ambiguous``) set is a sprinkling with some pairs toggled and the order closed again; each group of such
a set keeps a ``relation_labels`` array in ``adj``'s layout (uint8, N x N, transposed as Zarr.jl leaves ``adj``):
1 for each relation the closed order has and the sprinkling lacks (added) or lacks and the sprinkling has
(removed), so that ``R ^ relation_labels`` is the sprinkling. A group of another kind without it has no change:
all its labels are 0. QuantumGrav.jl's produce_data.jl writes no ``relation_labels``: a per-pair target on its
destroyed sets is refused (``check_relation_labels``), as is data that records no label at all; read with
``missing_labels="unknown"`` (an applied run, as for ``node_targets``), such a set's ``y`` is NaN, its truth
unknown.

The candidate pairs of a set of N elements are its N (N - 1) / 2 unordered pairs {i, j}, listed as i < j in the
item's element order (node k is element k + 1 of the store's set), row by row (``torch.triu_indices``). Why all of
them, and unordered:

* a removed relation is absent from the input, so the pairs the input relates cannot be the candidates: an
  unrelated pair may be one whose relation was removed;
* a strict partial order relates a pair in one direction at most, so a pair has three input states (``PAIR_STATES``
  of ``tasks.relation``: unrelated, related but not a link, a link) and "changed" is well defined without a direction;
* in a natural labelling (every generated set: the sprinkling is sorted by time and toggles draw i < j) every
  relation, added or removed, goes from the lower index to the higher, so these are exactly the pairs a toggle
  can touch, and a related pair's state says its direction too. A set in another labelling is refused
  (``pair_target``): the pair head and the rivals read the order from the pairs' states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import math

import numpy as np
import torch

from ..common.errors import UserError
from ..tasks.registry import RelationBinaryTask
from .order_dimension import two_dimension_violation_parts
from .orders import transitive_reduction

RELATION_LABELS_ARRAY = "relation_labels"
# Each per-pair target, the task it is learned as, and its two classes (0, 1).
RELATION_TARGET_TASKS: dict[str, str] = {"toggled_relations": RelationBinaryTask.type}
RELATION_TARGET_CLASS_NAMES: dict[str, list[str]] = {"toggled_relations": ["unchanged", "toggled"]}
# The kinds (QuantumGrav.jl's names) whose sets have what each target asks about, so must record their labels.
LABELLED_KINDS: dict[str, tuple[str, ...]] = {"toggled_relations": ("destroyed", "destroyed_ambiguous")}
def pair_relation(R: np.ndarray, links: np.ndarray | None = None) -> torch.Tensor:
    """uint8 per candidate pair: its ``PAIR_STATES`` index in the causal matrix ``R`` (related either way; a link
    when ``links``, else the transitive reduction of ``R``, relates it)."""
    links = transitive_reduction(R) if links is None else links
    first, second = np.triu_indices(len(R), 1)
    related = R[first, second] | R[second, first]
    linked = links[first, second] | links[second, first]
    return torch.from_numpy(related.astype(np.uint8) + linked.astype(np.uint8))


def violation_part(R: np.ndarray) -> torch.Tensor:
    """long [N, 2]: each element's violating part of two-dimensionality in the two tournaments of the exact 2D
    test (``order_dimension.two_dimension_violation_parts``; -1: on no cycle). Per set, at data time: the pair head
    reads from it which pairs have ends on a violation and which are edges of a violating cycle, the 2D test's local
    evidence that a pair's relation changed (in d >= 3 every sprinkling violates, and it carries nothing)."""
    return torch.from_numpy(np.stack(two_dimension_violation_parts(R), axis=1))


def pair_labels(changed: np.ndarray) -> torch.Tensor:
    """float32 per candidate pair: 1 where the pair's relation changed (``changed``: N x N, either direction)."""
    first, second = np.triu_indices(len(changed), 1)
    return torch.from_numpy((changed[first, second] | changed[second, first]).astype(np.float32))


def pair_target(R: np.ndarray, links: torch.Tensor | None, group: Any, format_error: Callable[[str], Exception],
                unknown: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A store group's per-pair labels (``pair_labels`` of its ``relation_labels``; NaN where ``unknown``: labels
    its kind should have and it lacks, read for an applied run), input states (``pair_relation``) and its elements'
    violating parts (``violation_part``) for its causal matrix ``R``; ``links``: the links as an edge index [2, E]
    where the graph has them (else found from ``R``)."""
    if np.tril(R).any():
        raise format_error("its causal matrix relates a later element to an earlier one; a per-pair target reads "
                           "sets in a natural labelling (every relation from the lower index to the higher, as "
                           "every set QuantumGrav.data.kinds generates), so that a pair's state gives its direction")
    linked = None
    if links is not None:
        linked = np.zeros_like(R)
        linked[links[0].numpy(), links[1].numpy()] = True
    states, parts = pair_relation(R, linked), violation_part(R)
    if unknown:
        return torch.full(states.shape, math.nan), states, parts
    return pair_labels(read_relation_labels(group, len(R), format_error)), states, parts


def relation_labels_missing(target: str, kind: str, group_folder: Path) -> bool:
    """Whether the set stored in ``group_folder``, of QuantumGrav.jl kind ``kind``, has what ``target`` asks about
    but records no labels of it (its truth is unknown)."""
    return kind in LABELLED_KINDS[target] and not (group_folder / RELATION_LABELS_ARRAY).is_dir()


def unlabelled_relation_stores(target: str, first_groups: Sequence[Path], kinds: Sequence[str],
                               missing_labels: str) -> list[str]:
    """The names of the stores whose first set lacks the labels of a per-pair ``target`` that its kind should have
    (none for another target); under ``missing_labels`` ``refuse``, one UserError instead."""
    if target not in RELATION_TARGET_TASKS:
        return []
    if missing_labels == "refuse":
        check_relation_labels(target, first_groups, kinds)
    return [group.parent.name for group, kind in zip(first_groups, kinds)
            if relation_labels_missing(target, kind, group)]


def read_relation_labels(group: Any, num_elements: int, format_error: Callable[[str], Exception]) -> np.ndarray:
    """The group's changed relations as a bool N x N matrix like the causal matrix (the stored array transposed
    back), all False where it has none; a stored array of another shape or with values other than 0 and 1 raises
    ``format_error(problem)``."""
    try:
        stored = group[RELATION_LABELS_ARRAY]
    except KeyError:
        return np.zeros((num_elements, num_elements), dtype=bool)
    labels = np.asarray(stored[...])
    if labels.shape != (num_elements, num_elements):
        raise format_error(f"'{RELATION_LABELS_ARRAY}' has shape {labels.shape}; expected one label per pair, "
                           f"({num_elements}, {num_elements}) as 'adj'")
    if labels.dtype.kind not in "biu" or ((labels != 0) & (labels != 1)).any():
        raise format_error(f"'{RELATION_LABELS_ARRAY}' ({labels.dtype}) has entries other than 0 and 1")
    return np.ascontiguousarray(labels.T.astype(bool))


def check_relation_labels(target: str, first_groups: Sequence[Path], kinds: Sequence[str]) -> None:
    """A per-pair ``target`` needs labels where its kinds have them: one UserError naming a store of such a kind
    whose first set (``first_groups``: its folder; ``kinds``: its kind) records none, or saying that no store
    records any."""
    stores = [group.parent for group in first_groups]
    labelled = [(group / RELATION_LABELS_ARRAY).is_dir() for group in first_groups]
    how = (f"QuantumGrav.jl's produce_data.jl writes adj, manifold_like and cset_type only, no "
           f"{RELATION_LABELS_ARRAY}; generate sets with their changed relations recorded "
           f"(QuantumGrav.data.kinds.KindsDataset, configs/toggled_relations.yaml), or choose target manifold_like "
           f"or cset_type")
    for store, kind, has_labels in zip(stores, kinds, labelled):
        if kind in LABELLED_KINDS[target] and not has_labels:
            raise UserError(f"QuantumGrav.jl store {store}: target {target} asks about each pair of elements of its "
                            f"{kind} sets, but they carry no '{RELATION_LABELS_ARRAY}' array, so every label would "
                            f"be 0; {how}")
    if not any(labelled):
        raise UserError(f"QuantumGrav.jl data {', '.join(str(store) for store in stores)}: target {target} needs "
                        f"per-pair labels, and no store records any ('{RELATION_LABELS_ARRAY}'), so every label "
                        f"would be 0; {how}")
