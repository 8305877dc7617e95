"""Questions about each element of a causal set, read from the stores our generator writes (``data.kinds``).

``inserted_block``: is the element inside the random 3-layer block inserted into a ``merged`` (or
``merged_ambiguous``) set (from 4 elements to all but one of the set)? Each group of such a set keeps a
``node_labels`` array (uint8, 1 inside the block, in element order, so node k of an item is element k + 1 of the
store's set); a group of another kind without it has no inserted block: all its labels are 0. QuantumGrav.jl's
produce_data.jl writes no ``node_labels``: its merged sets have a block nobody recorded, so a per-element target on
them is refused (``check_node_labels``), as is data that records no label at all (every target would be 0). A
trained run applied to such stores (``evaluate``) needs no labels: read with ``missing_labels="unknown"``, a set
whose labels were not recorded gets ``y`` of NaN, its truth unknown (``labels_missing``), and is scored only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..common.errors import UserError
from ..tasks.registry import NodeBinaryTask
from .relation_targets import RELATION_LABELS_ARRAY, RELATION_TARGET_TASKS

NODE_LABELS_ARRAY = "node_labels"
# Each per-element target, the task it is learned as, and its two classes (0, 1).
NODE_TARGET_TASKS: dict[str, str] = {"inserted_block": NodeBinaryTask.type}
NODE_TARGET_CLASS_NAMES: dict[str, list[str]] = {"inserted_block": ["outside_block", "inserted_block"]}
# The kinds (QuantumGrav.jl's names) whose sets have what each target asks about, so must record their labels.
LABELLED_KINDS: dict[str, tuple[str, ...]] = {"inserted_block": ("merged", "merged_ambiguous")}
# What a reader does with a set of such a kind that records no labels: refuse it (training: every label would be a
# wrong 0), or give it an unknown truth, y of NaN (an applied run scores it without measuring).
MISSING_LABELS = ("refuse", "unknown")


def labels_missing(target: str, kind: str, group_folder: Path) -> bool:
    """Whether the set stored in ``group_folder``, of QuantumGrav.jl kind ``kind``, has what ``target`` asks about
    but records no labels of it (its truth is unknown)."""
    return kind in LABELLED_KINDS[target] and not (group_folder / NODE_LABELS_ARRAY).is_dir()


def node_target(labels: torch.Tensor, target: str, kind: str, group_folder: Path, missing_labels: str) -> torch.Tensor:
    """A set's ``y`` for a per-element ``target``: its stored ``labels`` (zeros for a kind without what it asks
    about); NaN, its truth unknown, where they should be recorded but are not and ``missing_labels`` is
    ``unknown`` (an applied run scores such a set, never measures it)."""
    if missing_labels == "unknown" and labels_missing(target, kind, group_folder):
        return torch.full(labels.shape, math.nan)
    return labels.float()


def unlabelled_stores(target: str, first_groups: Sequence[Path], kinds: Sequence[str],
                      missing_labels: str) -> list[str]:
    """The names of the stores whose first set (``first_groups``: its folder; ``kinds``: its kind) lacks the labels of
    a per-element ``target`` that its kind should have (none for a per-set target); under ``missing_labels``
    ``refuse``, one UserError instead (``check_node_labels``)."""
    if target not in NODE_TARGET_TASKS:
        return []
    if missing_labels == "refuse":
        check_node_labels(target, first_groups, kinds)
    return [group.parent.name for group, kind in zip(first_groups, kinds) if labels_missing(target, kind, group)]


def describe_unlabelled(store_names: Sequence[str], target: str) -> str | None:
    """One line naming the stores whose sets' ``target`` truth is unknown, or None."""
    if not store_names:
        return None
    shown = ", ".join(store_names[:3]) + (f" and {len(store_names) - 3} more" if len(store_names) > 3 else "")
    array = RELATION_LABELS_ARRAY if target in RELATION_TARGET_TASKS else NODE_LABELS_ARRAY
    return (f"QuantumGrav.jl data: the sets of {shown} carry no '{array}' (QuantumGrav.jl's "
            f"produce_data.jl records none), so their {target} truth is unknown: they are scored, not measured")


def check_node_labels(target: str, first_groups: Sequence[Path], kinds: Sequence[str]) -> None:
    """A per-element ``target`` needs labels where its kinds have them: one UserError naming a store of such a kind
    whose first set (``first_groups``: its folder; ``kinds``: its kind) records none, or saying that no store
    records any."""
    stores = [group.parent for group in first_groups]
    labelled = [(group / NODE_LABELS_ARRAY).is_dir() for group in first_groups]
    wants = LABELLED_KINDS[target]
    how = (f"QuantumGrav.jl's produce_data.jl writes adj, manifold_like and cset_type only, no {NODE_LABELS_ARRAY}; "
           f"generate sets with their {target} recorded (QuantumGrav.data.kinds.KindsDataset, "
           f"configs/inserted_block.yaml), or choose target manifold_like or cset_type")
    for store, kind, has_labels in zip(stores, kinds, labelled):
        if kind in wants and not has_labels:
            raise UserError(f"QuantumGrav.jl store {store}: target {target} asks about each element of its {kind} "
                            f"sets, but they carry no '{NODE_LABELS_ARRAY}' array, so every label would be 0; {how}")
    if not any(labelled):
        raise UserError(f"QuantumGrav.jl data {', '.join(str(store) for store in stores)}: target {target} needs "
                        f"per-element labels, and no store records any ('{NODE_LABELS_ARRAY}'), so every label would "
                        f"be 0; {how}")


def read_node_labels(group: Any, num_elements: int, format_error: Callable[[str], Exception]) -> torch.Tensor:
    """The group's per-element labels as uint8 ``[num_elements]``, zeros where it has none; a stored array of
    another length or with values other than 0 and 1 raises ``format_error(problem)``."""
    try:
        stored = group[NODE_LABELS_ARRAY]
    except KeyError:
        return torch.zeros(num_elements, dtype=torch.uint8)
    labels = np.asarray(stored[...])
    if labels.shape != (num_elements,):
        raise format_error(f"'{NODE_LABELS_ARRAY}' has shape {labels.shape}; expected one label per element, "
                           f"({num_elements},)")
    if labels.dtype.kind not in "biu" or ((labels != 0) & (labels != 1)).any():
        raise format_error(f"'{NODE_LABELS_ARRAY}' ({labels.dtype}) has entries other than 0 and 1")
    return torch.from_numpy(labels.astype(np.uint8))
