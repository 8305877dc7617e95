"""CausalSetDataset (graphs, labels, on-disk cache) and split_indices."""

import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data import dataset as qg_data
from QuantumGrav.data.dataset import DATA_DEFAULTS, CausalSetDataset, split_indices

SMALL = {"num_samples": 30, "n_min": 12, "n_max": 18, "seed": 5}


@pytest.fixture
def generation_calls(monkeypatch):
    """Counts the blocks the dataset generates (in this process: SMALL is one block)."""
    calls = []
    generate = qg_data.generate_block_files

    def counting(*args, **kwargs):
        calls.append(args)
        return generate(*args, **kwargs)

    monkeypatch.setattr(qg_data, "generate_block_files", counting)
    return calls


def test_graphs_carry_features_edges_and_labels(tmp_path):
    dataset = CausalSetDataset(tmp_path, **SMALL)
    assert len(dataset) == 30 and dataset.num_node_features == len(cs.NODE_FEATURES)
    assert dataset.class_names == list(cs.DEFAULT_CLASSES) and dataset.num_classes == len(cs.DEFAULT_CLASSES)
    for graph in dataset:
        n = graph.num_nodes
        assert 12 <= n <= 18 and graph.x.shape == (n, len(cs.NODE_FEATURES)) and graph.x.dtype == torch.float32
        assert graph.edge_index.dtype == torch.long and (graph.edge_index[0] < graph.edge_index[1]).all()
        assert graph.y.shape == (1,) and graph.invariants.shape == (1, len(cs.INVARIANT_NAMES))
        cset_type = cs.CSET_TYPES[int(graph.cset_type)]
        assert dataset.class_names[int(graph.y)] == cset_type
        assert bool(graph.manifold_like) == (cset_type in cs.MANIFOLD_CLASSES)
        assert int(graph.dimension) == cs.MANIFOLD_CLASSES.get(cset_type, -1)
    subset = dataset.index_select([3, 1])
    assert subset.class_names == dataset.class_names and torch.equal(subset[1].x, dataset[1].x)


def test_link_edges_are_the_hasse_diagram_and_relation_edges_all_relations(tmp_path):
    links = CausalSetDataset(tmp_path, **SMALL, edges="links")
    relations = CausalSetDataset(tmp_path, **SMALL, edges="relations")
    for link_graph, relation_graph in zip(links, relations):
        n = relation_graph.num_nodes
        R = np.zeros((n, n), dtype=bool)
        R[tuple(relation_graph.edge_index.numpy())] = True
        L = np.zeros((n, n), dtype=bool)
        L[tuple(link_graph.edge_index.numpy())] = True
        np.testing.assert_array_equal(L, cs.transitive_reduction(R))
        fraction = float(relation_graph.invariants[0, cs.INVARIANT_NAMES.index("ordering_fraction")])
        assert R.sum() == pytest.approx(fraction * n * (n - 1) / 2)


def test_second_construction_loads_the_cache_without_generating(tmp_path, generation_calls):
    first = CausalSetDataset(tmp_path, **SMALL)
    assert len(generation_calls) == 1
    second = CausalSetDataset(tmp_path, **SMALL)
    assert len(generation_calls) == 1, "the cached file was reused"
    assert second.processed_dir == first.processed_dir
    for a, b in zip(first, second):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
    assert not [p for p in Path(first.processed_dir).iterdir() if p.name.endswith(".tmp")]


def test_changing_any_generation_parameter_regenerates(tmp_path, generation_calls):
    changes = [{"num_samples": 31}, {"n_min": 11}, {"n_max": 19}, {"seed": 6}, {"destroy_fraction": 0.05},
               {"classes": ("minkowski_2d", "layered")}, {"dimensions": (4, 3, 2)}, {"edges": "relations"},
               {"target": "manifold_like"}]
    not_generation = {"root", "split", "split_seed", "storage", "workers"}
    assert {key for change in changes for key in change} == set(DATA_DEFAULTS) - not_generation
    folders = {CausalSetDataset(tmp_path, **SMALL).processed_dir}
    folders |= {CausalSetDataset(tmp_path, **{**SMALL, **change}).processed_dir for change in changes}
    assert len(folders) == len(generation_calls) == len(changes) + 1


def test_from_config_uses_defaults_and_ignores_the_split(tmp_path):
    cfg = {"root": str(tmp_path), **SMALL}
    dataset = CausalSetDataset.from_config(cfg)
    resplit = CausalSetDataset.from_config({**cfg, "split": [0.5, 0.25, 0.25], "split_seed": 1})
    assert resplit.processed_dir == dataset.processed_dir
    not_generation = ("root", "split", "split_seed", "storage", "workers")
    expected = {k: v for k, v in DATA_DEFAULTS.items() if k not in not_generation}
    expected = {**expected, **SMALL, "dimensions": list(expected["dimensions"]), "classes": list(expected["classes"])}
    assert dataset.generation_params == expected
    with pytest.raises(ValueError, match="unknown keys"):
        CausalSetDataset.from_config({**cfg, "num_sample": 3})


def test_data_defaults_match_the_constructor():
    signature = inspect.signature(CausalSetDataset.__init__).parameters
    assert set(DATA_DEFAULTS) == {"root", "split", "split_seed"} | {
        name for name in signature if name not in ("self", "root", "log", "transform")}
    for name, default in DATA_DEFAULTS.items():
        if name in signature and name != "root":
            assert signature[name].default == default, name


def test_manifold_like_target(tmp_path):
    dataset = CausalSetDataset(tmp_path, **SMALL, target="manifold_like")
    assert dataset.num_classes == 2
    labels = [int(g.y) for g in dataset]
    assert labels == [int(g.manifold_like) for g in dataset] and set(labels) == {0, 1}


def test_dimension_target_keeps_only_manifold_like_sets(tmp_path):
    dataset = CausalSetDataset(tmp_path, **SMALL, target="dimension")
    assert dataset.class_names == ["d=2", "d=3", "d=4"] and len(dataset) == SMALL["num_samples"]
    assert all(bool(g.manifold_like) for g in dataset)
    assert [int(g.dimension) for g in dataset] == [(2, 3, 4)[int(g.y)] for g in dataset]
    with pytest.raises(ValueError, match="classes"):
        CausalSetDataset(tmp_path, **SMALL, target="dimension", classes=("destroyed", "layered"))


def test_flip_fractions_of_a_range_are_drawn_per_destroyed_set(tmp_path):
    dataset = CausalSetDataset(tmp_path, num_samples=120, n_min=12, n_max=16, classes=("destroyed", "layered"),
                               destroy_fraction=[0.001, 0.1], seed=3)
    destroyed = dataset.class_names.index("destroyed")
    fractions = np.array([float(g.flip_fraction) for g in dataset if int(g.y) == destroyed])
    assert len(fractions) == 60 and ((0.001 <= fractions) & (fractions <= 0.1)).all()
    decades = np.histogram(np.log10(fractions), bins=[-3, -2, -1])[0]
    assert decades.min() >= 15, "log-uniform: both decades get sets"
    assert all(float(g.flip_fraction) == 0.0 for g in dataset if int(g.y) != destroyed)
    fixed = CausalSetDataset(tmp_path, **SMALL, classes=("destroyed",), destroy_fraction=0.02)
    assert [float(g.flip_fraction) for g in fixed] == pytest.approx([0.02] * len(fixed))
    assert dataset.generation_params["destroy_fraction"] == [0.001, 0.1]


def test_config_takes_a_flip_fraction_or_a_range():
    assert QG.load_config({"data": {"destroy_fraction": [0.001, 0.1]}})["data"]["destroy_fraction"] == [0.001, 0.1]
    with pytest.raises(QG.ConfigError, match=r"data.destroy_fraction: expected a range \[low, high\] with low <= high"):
        QG.load_config({"data": {"destroy_fraction": [0.1, 0.01]}})
    with pytest.raises(QG.ConfigError, match="data.destroy_fraction: item 1: expected a number > 0.0"):
        QG.load_config({"data": {"destroy_fraction": [0.1, 0]}})


@pytest.mark.parametrize("kwargs, argument", [({"edges": "hasse"}, "edges"), ({"target": "curvature"}, "target"),
                                              ({"num_samples": 0}, "num_samples"),
                                              ({"n_min": 30}, "n_min"),
                                              ({"destroy_fraction": [0.1, 0.01]}, "destroy_fraction"),
                                              ({"destroy_fraction": [0.1]}, "destroy_fraction")])
def test_bad_arguments_are_named(tmp_path, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        CausalSetDataset(tmp_path, **{**SMALL, **kwargs})


# --------------------------------------------------------------------------- split_indices
def test_split_is_deterministic_disjoint_and_complete():
    np.random.seed(0)
    train, val, test = split_indices(100, [0.7, 0.15, 0.15], seed=3)
    np.random.seed(99)  # global RNG state must not matter
    assert (train, val, test) == split_indices(100, [0.7, 0.15, 0.15], seed=3)
    assert sorted(train + val + test) == list(range(100))
    assert (len(train), len(val), len(test)) == (70, 15, 15)
    assert split_indices(100, [0.7, 0.15, 0.15], seed=4) != (train, val, test)


@pytest.mark.parametrize("num_items, fractions",
                         [(3, [0.7, 0.15, 0.15]), (4, [0.1, 0.45, 0.45]), (5, [0.98, 0.01, 0.01])])
def test_every_split_is_non_empty(num_items, fractions):
    parts = split_indices(num_items, fractions, seed=0)
    assert all(parts) and sorted(sum(parts, [])) == list(range(num_items))


@pytest.mark.parametrize("num_items, fractions, argument", [(2, [0.7, 0.15, 0.15], "num_items"),
                                                            (10, [0.5, 0.5], "fractions"),
                                                            (10, [0.7, 0.2, 0.2], "fractions"),
                                                            (10, [1.0, 0.0, 0.0], "fractions")])
def test_bad_split_arguments_are_named(num_items, fractions, argument):
    with pytest.raises(ValueError, match=argument):
        split_indices(num_items, fractions, seed=0)
