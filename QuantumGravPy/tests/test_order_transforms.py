"""What the order models read, derived per set by data.transforms.OrderStructure: every relation with its
interval size, the unrelated pairs, a random-walk encoding and the strongest rival's per-set features; a set that is
no partial order is refused in one line."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from QuantumGrav.data import transforms
from QuantumGrav.data.graph_observables import GRAPH_OBSERVABLE_NAMES
from QuantumGrav.data.invariants import NODE_FEATURES, node_features
from QuantumGrav.data.kinds.dataset import KindsDataset
from QuantumGrav.data.transforms import OrderStructure, order_structure, set_feature_names, with_order_structure
from QuantumGrav.data.orders import natural_order, transitive_reduction

# 0 < 1 < 3, 0 < 2 < 3, 1 and 2 unrelated: a diamond of four elements, a 2D order.
DIAMOND = np.zeros((4, 4), dtype=bool)
DIAMOND[0, 1] = DIAMOND[0, 2] = DIAMOND[1, 3] = DIAMOND[2, 3] = DIAMOND[0, 3] = True


def crown() -> np.ndarray:
    """The standard example S_3 (a_i < b_j iff i != j, elements a_0..a_2 then b_0..b_2): order dimension 3."""
    R = np.zeros((6, 6), dtype=bool)
    for i in range(3):
        for j in range(3):
            R[i, 3 + j] = i != j
    return R


def as_item(R: np.ndarray, y: int = 0) -> Data:
    """A causal set as the datasets give it: node features and its links past -> future."""
    links = transitive_reduction(R)
    order = natural_order(R)  # the features are computed in a natural labelling, then given back in R's
    x = np.empty((len(R), len(NODE_FEATURES)), dtype=np.float32)
    x[order] = node_features(R[np.ix_(order, order)])
    return Data(x=torch.from_numpy(x), edge_index=torch.from_numpy(np.stack(np.nonzero(links))).long(),
                y=torch.tensor([y]), num_nodes=len(R))


def test_every_relation_comes_with_the_elements_between_its_ends():
    got = order_structure(np.stack(np.nonzero(transitive_reduction(DIAMOND))), 4, incomparable=True)
    pairs = {(int(a), int(b)): int(c) for (a, b), c in zip(got["relation_index"].T, got["relation_interval"])}
    assert pairs == {(0, 1): 0, (0, 2): 0, (1, 3): 0, (2, 3): 0, (0, 3): 2}
    assert got["incomparable_index"].T.tolist() == [[1, 2]]


def test_the_rivals_set_features_are_the_exact_test_and_the_observables():
    names = set_feature_names(["two_dimension", "graph_observables"])
    assert names[:2] == ("is_two_dimensional", "two_dimension_violation_fraction")
    assert names[2:] == GRAPH_OBSERVABLE_NAMES and len(names) == 36
    two_d = order_structure(np.stack(np.nonzero(DIAMOND)), 4, set_features=["two_dimension"])["set_features"]
    three_d = order_structure(np.stack(np.nonzero(crown())), 6, set_features=["two_dimension"])["set_features"]
    assert two_d.tolist() == [1.0, 0.0]
    assert three_d[0] == 0.0 and three_d[1] > 0
    with pytest.raises(ValueError, match="set_features: expected distinct groups"):
        OrderStructure(set_features=["two_dimension", "exact_test"])


def test_the_transform_derives_each_set_once_and_batches_like_edge_index(monkeypatch):
    transform = OrderStructure(set_features=["two_dimension"], random_walk_steps=3)
    calls = []
    monkeypatch.setattr(transforms, "order_structure", lambda *a, **k: calls.append(1) or order_structure(*a, **k))
    first, second = as_item(DIAMOND), as_item(crown())
    items = [transform(first), transform(second), transform(first.clone())]
    assert len(calls) == 2, "the same set (same edges) is derived once"
    assert items[0].order_pe.shape == (4, 3) and items[1].set_features.shape == (1, 2)
    batch = Batch.from_data_list(items[:2])
    assert batch.set_features.shape == (2, 2)
    assert batch.relation_index[:, batch.relation_index[0] >= 4].min() >= 4, "the second set's relations are offset"
    assert int(batch.relation_index.max()) == 9
    assert not hasattr(first, "relation_index"), "the dataset's own item is left as it is"


def test_a_set_with_a_cycle_is_refused_in_one_line():
    item = as_item(DIAMOND)
    item.edge_index = torch.cat([item.edge_index, torch.tensor([[3], [0]])], 1)
    with pytest.raises(ValueError, match=r"not a causal set .*cycle"):
        OrderStructure()(item)


def test_a_config_builds_the_nine_kinds_with_the_transform(tmp_path):
    data = with_order_structure(dataset=KindsDataset, path=tmp_path, num_per_kind=1, n_min=24, n_max=26, seed=3,
                                order_structure={"set_features": ["two_dimension", "graph_observables"]})
    item = data[0]
    assert type(data).__name__ == "KindsDataset" and data.describe(0)["kind"]
    assert item.set_features.shape == (1, 36) and item.relation_interval.numel() == item.relation_index.size(1)
    with pytest.raises(ValueError, match="transform: with_order_structure sets"):
        with_order_structure(dataset=KindsDataset, path=tmp_path, num_per_kind=1, n_min=24, n_max=26, transform=None)
    with pytest.raises(ValueError, match="dataset: with_order_structure needs the dataset class"):
        with_order_structure(path=tmp_path, num_per_kind=1, n_min=24, n_max=26)
