"""Questions about each element of a causal set, read from the stores our generator writes (``data.kinds``).

``inserted_block``: is the element inside the random 3-layer block inserted into a ``merged`` (or
``merged_ambiguous``) set (from 4 elements to all but one of the set)? Each group of such a set keeps a ``node_labels`` array (uint8, 1 inside the block, in
element order, so node k of an item is element k + 1 of the store's set); a group without it (every other kind, and
QuantumGrav.jl's own stores) has no inserted block: all its labels are 0.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

NODE_LABELS_ARRAY = "node_labels"
# Each per-element target, the task it is learned as, and its two classes (0, 1).
NODE_TARGET_TASKS: dict[str, str] = {"inserted_block": "node_binary"}
NODE_TARGET_CLASS_NAMES: dict[str, list[str]] = {"inserted_block": ["outside_block", "inserted_block"]}


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
