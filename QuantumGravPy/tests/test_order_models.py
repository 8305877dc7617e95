"""The models made for orders (models/typed_relations, pair_network, realizer, readouts, gps, hybrid): their shapes,
what they refuse (a relation that is no partial order, links pointing backwards in time, inputs of the wrong width),
that a relabelling of the elements changes nothing, and that the realizer's residual is zero exactly where a realizer
of its dimension exists."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

import QuantumGrav as QG
from QuantumGrav.data.transforms import OrderStructure
from QuantumGrav.data.invariants import NODE_FEATURES, order_invariants
from QuantumGrav.data.orders import natural_order
from QuantumGrav.tasks.binary import BinaryTask
from QuantumGrav.models.gps import GPSNetwork
from QuantumGrav.models.hybrid import SetFeatureGNN, SetFeatureMLP
from QuantumGrav.models.pair_network import PairNetwork
from QuantumGrav.models.readouts import GraphReadout
from QuantumGrav.models.realizer import RealizerHead, add_to_loss, soft_order
from QuantumGrav.models.typed_relations import TypedRelationGNN
from QuantumGrav.training.model_builder import build_model, check_model_forward
from conftest import REPO
from test_order_transforms import as_item, crown

F = len(NODE_FEATURES)
TRANSFORM = OrderStructure(set_features=["two_dimension", "graph_observables"], incomparable=True,
                           random_walk_steps=4)


def sprinkling(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 2D order from n random points: i < j iff both light-cone coordinates grow; and the coordinates."""
    uv = np.random.default_rng(seed).random((n, 2))
    return (uv[:, None, :] < uv[None, :, :]).all(-1), uv


def item(R: np.ndarray, y: int = 0):
    data = TRANSFORM(as_item(R, y))
    order = natural_order(R)
    data.invariants = torch.from_numpy(order_invariants(R[np.ix_(order, order)])).reshape(1, -1)
    return data


def batch_of(*orders) -> Batch:
    return Batch.from_data_list([item(R) for R in orders])


MODELS = {
    "typed_relations": lambda: TypedRelationGNN(F, 3, hidden_channels=(8, 8), incomparable=True, pe_channels=4,
                                                realizer_dimension=2, set_features=36),
    "typed_relations_transformer_topk": lambda: TypedRelationGNN(F, 3, hidden_channels=(8,), conv="transformer",
                                                                 readout="topk", readout_width=2),
    "pair_network": lambda: PairNetwork(F, 3, channels=4, layers=2, pe_channels=4, realizer_dimension=2,
                                        set_features=36),
    "gps": lambda: GPSNetwork(F, 3, channels=8, layers=2, heads=2, pe_channels=4, readout="distribution"),
    "hybrid_gnn": lambda: SetFeatureGNN(F, 3, hidden_channels=[8], head_hidden=[8]),
    "head_only": lambda: SetFeatureMLP(F, 3),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_row_per_set_and_no_change_when_the_elements_are_relabelled(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    first, _ = sprinkling(9, 1)
    out = model(batch_of(first, crown(), sprinkling(7, 2)[0]))
    assert out.shape == (3, 3) and torch.isfinite(out).all()
    permutation = np.random.default_rng(5).permutation(9)
    relabelled = model(batch_of(first[np.ix_(permutation, permutation)], crown(), sprinkling(7, 2)[0]))
    assert torch.allclose(out, relabelled, atol=1e-5), "a model of orders must not read the labels"


@pytest.mark.parametrize("name", ["typed_relations", "pair_network", "gps"])
def test_wrong_widths_and_a_missing_transform_are_refused(name):
    model = MODELS[name]()
    good = batch_of(sprinkling(6, 3)[0])
    narrow = good.clone()
    narrow.x = narrow.x[:, :-1]
    with pytest.raises(ValueError, match="expected 10 node features and 4 order_pe columns, got 13"):
        model(narrow)
    bare = Batch.from_data_list([as_item(sprinkling(6, 3)[0])])
    with pytest.raises(ValueError, match=r"has no (relation_index|order_pe).*OrderStructure"):
        model(bare)


def broken(kind: str) -> Batch:
    R, _ = sprinkling(10, 4)
    good = batch_of(R)
    if kind == "backwards":  # the links from future to past
        good.edge_index = good.edge_index.flip(0)
    elif kind == "cycle":  # one relation both ways
        good.relation_index = torch.cat([good.relation_index, good.relation_index[:, :1].flip(0)], 1)
        good.relation_interval = torch.cat([good.relation_interval, good.relation_interval[:1]])
    else:  # not transitive: a relation a < c with elements between taken out (one the checksum sees: the elements
        # between are not as many as the relations into a and out of c, see order_inputs._check_two_step_paths)
        first, second = good.relation_index
        into, out_of = torch.bincount(second, minlength=10), torch.bincount(first, minlength=10)
        seen = (good.relation_interval > 0) & (good.relation_interval != into[first] + out_of[second])
        keep = torch.ones(good.relation_index.size(1), dtype=torch.bool)
        keep[int(seen.nonzero()[0])] = False
        good.relation_index, good.relation_interval = good.relation_index[:, keep], good.relation_interval[keep]
    return good


@pytest.mark.parametrize("name", ["typed_relations", "typed_relations_transformer_topk", "pair_network", "gps"])
@pytest.mark.parametrize("kind, message", [("backwards", "runs against the order"),
                                           ("cycle", "precede each other"),
                                           ("intransitive", "not transitive")])
def test_an_input_that_is_no_partial_order_is_refused(name, kind, message):
    with pytest.raises(ValueError, match=message):
        MODELS[name]()(broken(kind))


def test_the_dense_check_names_the_missing_relation():
    from QuantumGrav.models.order_inputs import OrderBatch, dense_order

    bad = broken("intransitive")  # passes no cheap check but the checksum; the dense one says which relation
    order = OrderBatch(bad.relation_index, bad.relation_interval.float(), bad.relation_interval == 0,
                       torch.zeros(10, dtype=torch.long), 1)
    with pytest.raises(ValueError, match=r"not transitive: in set 0, \d+ < \d+ < \d+ but not \d+ < \d+"):
        dense_order(bad, order, "m")


def realizer_of_crown() -> np.ndarray:
    """Positions of S_3's elements in its three linear extensions L_i: the a's but a_i, b_i, a_i, the b's but b_i."""
    coordinates = np.zeros((6, 3))
    for i in range(3):
        sequence = [a for a in range(3) if a != i] + [3 + i, i] + [3 + b for b in range(3) if b != i]
        coordinates[sequence, i] = np.arange(6)
    return coordinates


def residual(R: np.ndarray, coordinates: np.ndarray) -> tuple[float, float]:
    loss, wrong = soft_order(torch.tensor(coordinates, dtype=torch.float32)[None], torch.tensor(R, dtype=torch.float32)[None],
                             torch.ones(1, len(R), dtype=torch.bool), torch.zeros(1, 1, 1), torch.full((1, 1, 1), 0.05))
    return float(loss), float(wrong)


def test_the_soft_order_residual_is_zero_exactly_where_a_realizer_of_that_dimension_exists():
    R, uv = sprinkling(30, 6)
    ranks = uv.argsort(0).argsort(0)  # the positions in the two linear orders, 1 apart
    assert residual(R, ranks) == (pytest.approx(0, abs=1e-6), 0.0), "a 2D order's light-cone coordinates realize it"
    assert residual(crown(), realizer_of_crown()) == (pytest.approx(0, abs=1e-6), 0.0)
    rng = np.random.default_rng(0)
    best = min(residual(crown(), rng.random((6, 2)))[1] for _ in range(2000))
    assert best > 0, "S_3 has dimension 3: no two coordinates realize it"


def test_the_pair_realizer_realizes_a_2d_order_from_a_transitive_orientation_of_its_unrelated_pairs():
    R, uv = sprinkling(12, 7)
    left_of = (uv[:, None, 0] < uv[None, :, 0]) & (uv[:, None, 1] > uv[None, :, 1])  # a transitive orientation
    head = RealizerHead(1, dimension=2, level="pair")
    with torch.no_grad():
        head.coordinates.weight.copy_(torch.tensor([[30.0], [-30.0]]))
        head.coordinates.bias.zero_()
    states = torch.tensor(left_of, dtype=torch.float32)[None, :, :, None]
    features, _ = head(states, torch.tensor(R, dtype=torch.float32)[None], torch.ones(1, 12, dtype=torch.bool))
    assert features[0, 1] == 0, "no pair of the product order is wrong"
    flipped = torch.tensor(left_of ^ np.triu(np.ones((12, 12), dtype=bool), 1) & ~(R | R.T), dtype=torch.float32)
    features, _ = head(flipped[None, :, :, None], torch.tensor(R, dtype=torch.float32)[None],
                       torch.ones(1, 12, dtype=torch.bool))
    assert features[0, 1] > 0, "an orientation that is not transitive leaves pairs wrong"


@pytest.mark.parametrize("level", ["pair", "element"])
def test_the_realizer_refuses_wrong_shapes_and_a_relation_that_is_no_order(level):
    R, _ = sprinkling(6, 9)
    relation, mask = torch.tensor(R, dtype=torch.float32)[None], torch.ones(1, 6, dtype=torch.bool)
    states = torch.zeros(1, 6, 6, 3) if level == "pair" else torch.zeros(1, 6, 3)
    head = RealizerHead(3, dimension=2, level=level)
    assert head(states, relation, mask)[0].shape == (1, 2)
    with pytest.raises(ValueError, match=rf"realizer \({level}\): expected .* with C = 3, got .*states"):
        head(states[..., :2], relation, mask)
    with pytest.raises(ValueError, match="expected R"):
        head(states, relation, mask[:, :5])
    looped, both_ways = relation.clone(), relation.clone()
    looped[0, 2, 2] = 1
    i, j = (int(v) for v in relation[0].nonzero()[0])
    both_ways[0, j, i] = 1
    with pytest.raises(ValueError, match="an element precedes itself"):
        head(states, looped, mask)
    with pytest.raises(ValueError, match=f"in set 0, ({i} and {j}|{j} and {i}) precede each other"):
        head(states, both_ways, mask)
    with pytest.raises(ValueError, match="0 and 1 only"):
        head(states, relation * 0.5, mask)


def test_the_readout_refuses_states_of_the_wrong_width_or_sets():
    graph = torch.arange(6) // 3
    for kind in ("mean", "distribution", "topk"):
        readout = GraphReadout(4, kind, width=2, k=2)
        assert readout(torch.zeros(6, 4), graph, 2).shape == (2, readout.out_width)
        with pytest.raises(ValueError, match=rf"readout \({kind}\): expected element states \[elements, 4\]"):
            readout(torch.zeros(6, 3), graph, 2)
        with pytest.raises(ValueError, match="got states \\[6, 4\\] and \\[5\\] set indices"):
            readout(torch.zeros(6, 4), graph[:5], 2)


def test_the_realizers_loss_joins_the_training_loss_and_nothing_else():
    outputs = torch.zeros(2, 1, requires_grad=True)
    extra = torch.tensor(3.0, requires_grad=True)
    joined = add_to_loss(outputs, extra, weight=0.5)
    (joined.sum() * 2).backward()
    assert torch.equal(joined, outputs) and float(extra.grad) == 0.5 and outputs.grad.eq(2).all()
    with torch.no_grad():
        assert add_to_loss(outputs, extra, 0.5) is outputs


def test_the_readouts_keep_what_a_mean_averages_away():
    x = torch.zeros(20, 1)
    spiked = x.clone()
    spiked[3] = 10.0  # one anomalous element in a set of 10, the mean moves by 1
    graph = torch.arange(20) // 10
    for kind in ("distribution", "topk"):
        readout = GraphReadout(1, kind, width=1)
        with torch.no_grad():
            (readout.project if kind == "distribution" else readout.scores).weight.fill_(1.0)
        plain, anomalous = readout(x, graph, 2), readout(spiked, graph, 2)
        assert plain.shape == (2, readout.out_width)
        assert (anomalous[0] - plain[0]).abs().max() >= 9.0, f"{kind}: the spike is kept at its size"
    with pytest.raises(ValueError, match="readout: expected one of"):
        GraphReadout(4, "median")


def test_the_hybrid_reads_the_rivals_features_and_the_head_alone_reads_no_graph():
    torch.manual_seed(2)
    hybrid, head = MODELS["hybrid_gnn"]().eval(), MODELS["head_only"]().eval()
    batch = batch_of(sprinkling(8, 8)[0], crown())
    other = batch.clone()
    other.set_features = other.set_features + 1.0
    assert not torch.allclose(hybrid(batch), hybrid(other))
    moved = batch.clone()
    moved.x = torch.randn_like(moved.x)
    assert torch.equal(head(batch), head(moved)) and not torch.allclose(head(batch), head(other))
    narrow = batch.clone()
    narrow.set_features = narrow.set_features[:, :30]
    with pytest.raises(ValueError, match="expected set_features of 36 columns per set"):
        hybrid(narrow)
    bare = Batch.from_data_list([as_item(sprinkling(6, 3)[0])])  # no OrderStructure: the rival's features missing
    bare.invariants = batch.invariants[:1]
    for model in (hybrid, head):
        with pytest.raises(ValueError, match=r"has no set_features .*OrderStructure"):
            model(bare)


CONFIGS = ["order_hybrid.yaml", "order_head_only.yaml", "order_typed_relations.yaml", "order_pair_network.yaml",
           "order_gps.yaml"]


@pytest.mark.parametrize("name", CONFIGS)
def test_each_shipped_config_builds_its_model_and_runs_it_on_a_nine_kinds_set(name, tmp_path):
    config = QG.load_config(REPO / "configs" / name, [f"data.kwargs.path={tmp_path}", "data.kwargs.num_per_kind=1",
                                                      "data.kwargs.n_min=24", "data.kwargs.n_max=26"])
    dataset = config["data"]["type"](**config["data"]["kwargs"])
    model = build_model(config["model"], dataset.num_node_features, 1)
    check_model_forward(model, dataset[0], BinaryTask(), config["model"], torch.device("cpu"))
