"""Order invariants derived from edge_index for items that come without them (QuantumGrav.data.derived_invariants)."""

import pickle

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data import orders as qg_orders
from QuantumGrav.data import derived_invariants
from QuantumGrav.data.dataset import CausalSetDataset, past_to_future_edges
from QuantumGrav.data.derived_invariants import (NotACausalSet, OrderInvariants, causal_matrix_of_edges,
                                                 invariants_of_edges, with_order_invariants)
from QuantumGrav.training.loaders import keys_needing_invariants

from own_data_helpers import UserCausalSets

MINIMAL, MAXIMAL = (cs.INVARIANT_NAMES.index(name) for name in ("minimal_fraction", "maximal_fraction"))


def relabelled(edge_index: torch.Tensor, perm: np.ndarray) -> torch.Tensor:
    """The same edges with element k renamed perm[k]: another labelling of the same causal set."""
    return torch.from_numpy(perm)[edge_index]


@pytest.mark.parametrize("edges", ["links", "relations"])
def test_derived_invariants_are_the_generators_in_any_labelling(tmp_path, edges):
    dataset = CausalSetDataset(tmp_path, num_samples=25, n_min=10, n_max=30, edges=edges, seed=4)
    rng = np.random.default_rng(0)
    for graph in dataset:
        shuffled = relabelled(graph.edge_index, rng.permutation(graph.num_nodes))
        assert torch.equal(invariants_of_edges(shuffled, graph.num_nodes), graph.invariants)


def test_edges_the_other_way_give_the_dual_order_only_minimal_and_maximal_swap():
    R = cs.sprinkle_diamond(40, 3, np.random.default_rng(1))[1]
    edges = past_to_future_edges(cs.transitive_reduction(R))
    forward, backward = invariants_of_edges(edges, 40)[0], invariants_of_edges(edges.flip(0), 40)[0]
    others = [k for k in range(len(cs.INVARIANT_NAMES)) if k not in (MINIMAL, MAXIMAL)]
    assert torch.allclose(forward[others], backward[others])
    assert (forward[MINIMAL], forward[MAXIMAL]) == (backward[MAXIMAL], backward[MINIMAL]) != (0.5, 0.5)


def test_isolated_nodes_are_elements_related_to_none():
    chain_and_two_alone = invariants_of_edges(torch.tensor([[0, 1], [1, 2]]), num_nodes=5)[0]
    assert chain_and_two_alone[cs.INVARIANT_NAMES.index("num_elements")] == 5
    assert chain_and_two_alone[cs.INVARIANT_NAMES.index("ordering_fraction")] == pytest.approx(3 / 10)
    assert chain_and_two_alone[MINIMAL] == chain_and_two_alone[MAXIMAL] == pytest.approx(3 / 5)
    assert not causal_matrix_of_edges(torch.zeros(2, 0, dtype=torch.long), 3).any()


@pytest.mark.parametrize("edge_index, problem", [
    ([[0, 1, 2], [1, 2, 0]], r"cycle \(0 -> 1 -> 2 -> 0: a directed cycle\)"),
    ([[0, 1, 1], [1, 0, 2]], r"cycle \(0 -> 1 -> 0: an edge both ways, as in an undirected graph\)"),
    ([[0, 2], [1, 2]], r"cycle \(2 -> 2: a self-loop\)"),
    ([[0], [7]], "edge_index refers to element 7 but the item has 4 nodes"),
])
def test_what_is_not_a_causal_set_is_named(edge_index, problem):
    with pytest.raises(NotACausalSet, match=problem):
        invariants_of_edges(torch.tensor(edge_index), 4)
    with pytest.raises(NotACausalSet, match="it has 1 element"):
        invariants_of_edges(torch.zeros(2, 0, dtype=torch.long), 1)


# --------------------------------------------------------------------------- the dataset wrapper
def test_each_item_is_derived_once_and_the_users_items_stay_unchanged(monkeypatch):
    sets = UserCausalSets(8)
    calls = []
    derive = derived_invariants.invariants_of_edges
    monkeypatch.setattr(derived_invariants, "invariants_of_edges", lambda *a: calls.append(a) or derive(*a))
    wrapped = OrderInvariants(sets)
    first = [wrapped[i] for i in range(8)]
    again = [wrapped[i] for i in range(8)] + [wrapped[-1]]
    assert len(calls) == 8, "one derivation per item and process"
    for item, repeated in zip(first, again):
        assert repeated.invariants is item.invariants and item.invariants.shape == (1, len(cs.INVARIANT_NAMES))
    assert all("invariants" not in item for item in sets.items), "the wrapped dataset's items are not changed"
    assert wrapped.class_names == sets.class_names and wrapped.num_classes == 4 and len(calls) == 8


def test_items_with_their_own_invariants_keep_them():
    item = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0], [1]]), y=torch.tensor([0]),
                invariants=torch.full((1, len(cs.INVARIANT_NAMES)), 7.0))
    assert OrderInvariants([item, item, item])[1] is item


def test_dataloader_workers_and_a_pickled_copy_derive_the_same_invariants():
    wrapped = OrderInvariants(UserCausalSets(9))
    serial = torch.cat([item.invariants for item in wrapped])
    loader = DataLoader(wrapped, batch_size=4, num_workers=2)
    assert torch.equal(torch.cat([batch.invariants for batch in loader]), serial)
    copied = pickle.loads(pickle.dumps(wrapped))  # what a spawned worker or rank gets
    assert torch.equal(torch.cat([item.invariants for item in copied]), serial)


def test_the_trainer_wraps_only_what_needs_invariants_and_lacks_them(tiny_config, tmp_path):
    sets = UserCausalSets(8)
    default = tiny_config({"model.graph_features": True}).sections
    assert keys_needing_invariants(default) == ["model.graph_features"]
    assert keys_needing_invariants(tiny_config({"testing.baselines": True}).sections) == ["testing.baselines"]
    custom = tiny_config({"model.type": QG.GNNClassifier, "model.graph_features": True}).sections
    assert keys_needing_invariants(custom) == [], "graph_features is the built-in model's key"
    assert with_order_invariants(sets, keys_needing_invariants(tiny_config().sections), "data") is sets
    assert isinstance(with_order_invariants(sets, keys_needing_invariants(default), "data"), OrderInvariants)
    generated = CausalSetDataset(tmp_path, num_samples=6, n_min=8, n_max=10)
    assert with_order_invariants(generated, keys_needing_invariants(default), "data") is generated


def test_an_item_that_is_not_an_order_is_one_config_error_naming_it_and_the_keys():
    sets = UserCausalSets(4)
    sets.items[2] = Data(x=sets.items[2].x, edge_index=torch.tensor([[0, 1], [1, 0]]), y=sets.items[2].y)
    wrapped = OrderInvariants(sets, "data.type (mine.Sets)", ("model.graph_features", "testing.baselines"))
    wrapped[1]
    with pytest.raises(QG.ConfigError, match=r"^data.type \(mine.Sets\): item 2 is not a causal set \(a partial order\): its "
                                             r"edge_index has a cycle \(0 -> 1 -> 0: .*\); model.graph_features and "
                                             r"testing.baselines need the order invariants of every item\. .*train "
                                             r"without them: model.graph_features: false, testing.baselines: false$"):
        wrapped[2]


def test_large_sets_through_the_tiled_product_get_the_generators_invariants(tmp_path, monkeypatch):
    """The closure runs in an order where the edges go forward, tile by tile (tiles of 8 here, as 256 at N in the
    thousands): the invariants are still the generator's, in any labelling, links or relations."""
    monkeypatch.setattr(qg_orders, "_PRODUCT_TILE", 8)
    dataset = CausalSetDataset(tmp_path, num_samples=6, n_min=40, n_max=60, edges="relations", seed=2)
    rng = np.random.default_rng(1)
    for graph in dataset:
        R = np.zeros((graph.num_nodes,) * 2, dtype=bool)
        R[tuple(graph.edge_index.numpy())] = True
        for edges in (graph.edge_index, past_to_future_edges(cs.transitive_reduction(R))):
            shuffled = relabelled(edges, rng.permutation(graph.num_nodes))
            assert torch.equal(invariants_of_edges(shuffled, graph.num_nodes), graph.invariants)


def test_longest_paths_see_a_cycle():
    assert cs.longest_paths(np.array([0, 1]), np.array([1, 2]), 4).tolist() == [0, 1, 2, 0]
    assert cs.longest_paths(np.array([0, 1, 2]), np.array([1, 2, 0]), 3) is None
