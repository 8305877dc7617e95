"""SparseTransformerConv computes what PyG's TransformerConv computes, with sparse products instead of
[edges, heads, channels] tensors: same outputs, same gradients, same state_dict, same checkpoints."""

from pathlib import Path

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import TransformerConv

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.models.gnn import BidirectionalConv
from QuantumGrav.models.product_counter import ProductCounter
from QuantumGrav.models.sparse_attention import Adjacency, SparseTransformerConv
from QuantumGrav.training.model_builder import build_model

NUM_FEATURES = len(cs.NODE_FEATURES)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TOL = {"rtol": 1e-4, "atol": 1e-5}


def random_graph(num_nodes: int, num_edges: int, generator: torch.Generator, isolated: int = 0) -> Data:
    """A random directed graph whose last ``isolated`` nodes have no edges at all, in random edge order."""
    connected = num_nodes - isolated
    src = torch.randint(0, connected, (num_edges,), generator=generator)
    dst = torch.randint(0, connected, (num_edges,), generator=generator)
    keep = src != dst
    edge_index = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)  # no duplicates, as in a causal set
    edge_index = edge_index[:, torch.randperm(edge_index.size(1), generator=generator)]
    return Data(x=torch.randn(num_nodes, 6, generator=generator), edge_index=edge_index)


def graphs_of_different_sizes() -> Data:
    generator = torch.Generator().manual_seed(0)
    graphs = [random_graph(17, 60, generator, isolated=3), random_graph(5, 6, generator),
              random_graph(1, 0, generator), random_graph(40, 200, generator, isolated=1)]
    return Batch.from_data_list(graphs)


def pair(kwargs: dict, in_channels: int = 6, out_channels: int = 8):
    """PyG's layer and ours with the same weights."""
    torch.manual_seed(1)
    theirs = TransformerConv(in_channels, out_channels, **kwargs)
    ours = SparseTransformerConv(in_channels, out_channels, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def outputs_and_gradients(layer, batch: Data, seed: int = 5, structure=None):
    """The layer's output on ``batch``, and the gradients of a fixed random function of it with respect to the
    input and every parameter, on the device of both. ``structure``: what the layer reads besides the features
    (default the batch's edge_index; an ``Adjacency``)."""
    x = batch.x.clone().requires_grad_(True)
    torch.manual_seed(seed)  # the same dropout mask on both sides
    out = layer(x, batch.edge_index if structure is None else structure)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(out.device)
    (out.float() * weights).sum().backward()  # float: the same function under mixed precision
    grads = {"x": x.grad, **{name: p.grad for name, p in layer.named_parameters()}}
    layer.zero_grad()
    return out.detach(), grads


def assert_same(theirs, ours, batch: Data) -> None:
    out_theirs, grads_theirs = outputs_and_gradients(theirs, batch)
    out_ours, grads_ours = outputs_and_gradients(ours, batch)
    torch.testing.assert_close(out_ours, out_theirs, **TOL)
    assert grads_ours.keys() == grads_theirs.keys()
    for name in grads_theirs:
        if grads_theirs[name] is None:  # a parameter that this configuration leaves unused (lin_skip without root_weight)
            assert grads_ours[name] is None, name
            continue
        torch.testing.assert_close(grads_ours[name], grads_theirs[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("beta", [False, True])
@pytest.mark.parametrize("root_weight", [True, False])
@pytest.mark.parametrize("out_channels", [8, 4])  # 6 -> 8 aggregates the input first, 6 -> 4 projects it first
def test_outputs_and_gradients_equal_pygs_transformer_conv(heads, concat, beta, root_weight, out_channels):
    theirs, ours = pair({"heads": heads, "concat": concat, "beta": beta, "root_weight": root_weight},
                        out_channels=out_channels)
    assert_same(theirs, ours, graphs_of_different_sizes())


@pytest.mark.parametrize("out_channels", [8, 4])
def test_a_layer_without_biases_equals_pygs(out_channels):
    theirs, ours = pair({"heads": 2, "concat": False, "bias": False}, out_channels=out_channels)
    assert_same(theirs, ours, graphs_of_different_sizes())


def dense_products(module, *inputs) -> int:
    """Multiply-adds of the dense products of one forward and backward pass (ProductCounter: sparse ones apart)."""
    counter = ProductCounter()
    with counter:
        module(*inputs).float().sum().backward()
    module.zero_grad()
    return counter.dense // 2


def test_the_default_shapes_skip_the_key_and_value_projections_and_fuse_both_directions():
    """In 16 -> 16 (no wider in than out) both directions run one GEMM before the sparse products and one after
    and about a third fewer multiply-adds than in PyG's order of products."""
    torch.manual_seed(0)
    ours = BidirectionalConv(*(SparseTransformerConv(16, 16, heads=2, concat=False) for _ in range(2)))
    theirs = BidirectionalConv(*(TransformerConv(16, 16, heads=2, concat=False) for _ in range(2)))
    theirs.load_state_dict(ours.state_dict())
    edge_index = torch.tensor([[0, 0, 1, 2, 3], [1, 2, 3, 3, 4]])
    # the products that do not grow with the graph (the weights' own) weigh little at realistic N
    x = torch.randn(4000, 16, requires_grad=True)  # a later layer: its input has a gradient too
    edges = torch.randint(0, 4000, (2, 8000))
    edges = torch.unique(torch.stack([edges.min(0).values, edges.max(0).values]), dim=1)
    ours_macs, their_macs = dense_products(ours, x, edges), dense_products(theirs, x, edges)
    # PyG: 4 projections of 16 -> 32 (16 for the root) per direction, forward and two products backward each
    assert their_macs == 3 * 4000 * 16 * (2 * 3 * 32 + 2 * 16)
    # ours: [x, 1] -> [A x + a, e.x + d] of every head (17 -> 2 x 2 x 17) and [y_f, y_b, x] (4 x 17 + 16) -> 16
    expected = 3 * 4000 * (17 * 2 * 2 * 17 + (4 * 17 + 16) * 16)
    assert expected <= ours_macs < expected + 3 * 10**5  # + the [H, D, D] products of the weights
    assert ours_macs < 0.7 * their_macs  # 0.68 at 16 wide, 0.65 at the default 128
    torch.testing.assert_close(ours(x[:5], edge_index), theirs(x[:5], edge_index), **TOL)


def test_the_product_counter_counts_sparse_products_by_their_nonzeros():
    """One layer's forward on a graph of E edges and H heads: the scores' SDDMM and the aggregation's SpMM are
    2 E H (D + 1) FLOPs each (the input and its column of ones), not products of [N H, N H] matrices."""
    batch = graphs_of_different_sizes()
    layer = SparseTransformerConv(6, 8, heads=2, concat=False)
    counter = ProductCounter()
    with counter, torch.no_grad():
        layer(batch.x, batch.edge_index)
    assert counter.sparse == 2 * (2 * batch.edge_index.size(1) * 2 * 7)
    assert counter.dense > 0


def test_a_checkpoint_of_the_default_model_written_before_the_reordering_loads_and_predicts_the_same():
    """tests/data/default_model_44088b4.pt: the default model (16 wide) as commit 44088b4 trained and saved it
    (tests/data/make_default_model_44088b4.py with that commit's source first on PYTHONPATH), with its logits."""
    saved = torch.load(Path(__file__).parent / "data" / "default_model_44088b4.pt", weights_only=True)
    model = QG.GNNClassifier(**saved["model_kwargs"])
    model.load_state_dict(saved["state_dict"])  # strict: the same names and shapes
    batch = Data(x=saved["x"], edge_index=saved["edge_index"], batch=saved["batch"], invariants=saved["invariants"])
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(batch), saved["logits"], **TOL)


def test_dropout_on_the_attention_draws_pygs_mask_in_training_mode():
    theirs, ours = pair({"heads": 2, "concat": False, "dropout": 0.3})
    batch = graphs_of_different_sizes()
    assert_same(theirs.train(), ours.train(), batch)
    out_eval, _ = outputs_and_gradients(ours.eval(), batch)
    out_train, _ = outputs_and_gradients(ours.train(), batch)
    assert not torch.allclose(out_eval, out_train), "dropout acts in training mode"


def bidirectional_pair(out_channels: int = 8, **kwargs):
    """PyG's layer and ours in both directions (BidirectionalConv), with the same weights."""
    torch.manual_seed(2)
    kwargs = {"heads": 2, "concat": False, **kwargs}
    theirs = BidirectionalConv(TransformerConv(6, out_channels, **kwargs), TransformerConv(6, out_channels, **kwargs))
    ours = BidirectionalConv(SparseTransformerConv(6, out_channels, **kwargs),
                             SparseTransformerConv(6, out_channels, **kwargs))
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


@pytest.mark.parametrize("out_channels", [8, 4])
@pytest.mark.parametrize("kwargs", [{}, {"heads": 1, "concat": True}, {"heads": 3, "concat": True},
                                    {"root_weight": False}, {"dropout": 0.3}])
def test_both_directions_equal_pygs_with_a_shared_adjacency(out_channels, kwargs):
    theirs, ours = bidirectional_pair(out_channels, **kwargs)
    batch = graphs_of_different_sizes()
    assert_same(theirs.train(), ours.train(), batch)  # dropout: both directions draw PyG's masks in its order
    adjacency = Adjacency.from_edge_index(batch.edge_index, batch.num_nodes)
    theirs.eval(), ours.eval()
    torch.testing.assert_close(ours(batch.x, adjacency), theirs(batch.x, batch.edge_index), **TOL)


def test_the_head_blocks_are_the_adjacency_once_per_head_on_the_diagonal():
    """HeadBlocks' matrix is blockdiag over heads in node-major order: entry (i*H + h, j*H + h) holds the value
    of edge j -> i for head h; its transpose and the caller-order index agree with it."""
    generator = torch.Generator().manual_seed(3)
    graph = random_graph(9, 40, generator, isolated=2)
    edge_index = torch.cat([graph.edge_index, graph.edge_index[:, :3]], dim=1)  # duplicate edges stay distinct
    adjacency = Adjacency.from_edge_index(edge_index, 9)
    for heads in (1, 3):
        blocks = adjacency.blocks(heads)
        values = torch.randn(edge_index.size(1), heads, generator=generator)  # caller order
        expected = torch.zeros(9 * heads, 9 * heads)
        for head in range(heads):
            expected.index_put_((edge_index[1] * heads + head, edge_index[0] * heads + head), values[:, head],
                                accumulate=True)
        in_block_order = values.reshape(-1)[blocks.caller]
        torch.testing.assert_close(blocks.matrix(in_block_order).to_dense(), expected)
        torch.testing.assert_close(blocks.matrix(in_block_order, transposed=True).to_dense(), expected.T)


@pytest.mark.parametrize("both_ways", [False, True])
def test_the_shared_blocks_hold_each_layers_adjacency_per_head_against_one_operand(both_ways):
    """SharedBlocks (every layer and head of the default shapes in one set of sparse products): row (l H + h) N + i
    holds the edges j -> i of layer l (0: along the edges, 1: against them) for head h at column j; the transpose
    and the caller order agree, and both matrices have sorted columns in every row (duplicate edges included)."""
    generator = torch.Generator().manual_seed(4)
    graph = random_graph(9, 40, generator, isolated=2)
    edge_index = torch.cat([graph.edge_index, graph.edge_index[:, :3]], dim=1)  # duplicate edges stay distinct
    adjacency = Adjacency.from_edge_index(edge_index, 9)
    directions = (edge_index, edge_index.flip(0))[:2 if both_ways else 1]
    for heads in (1, 2, 3):
        blocks = adjacency.shared_blocks(heads, both_ways)
        assert blocks is adjacency.shared_blocks(heads, both_ways)
        values = torch.randn(len(directions), edge_index.size(1), heads, generator=generator)  # caller order
        expected = torch.zeros(len(directions) * heads * 9, 9)
        for layer, (source, target) in enumerate(directions):
            for head in range(heads):
                expected.index_put_(((layer * heads + head) * 9 + target, source), values[layer, :, head],
                                    accumulate=True)
        in_block_order = values.reshape(-1)[blocks.caller]
        for transposed, dense in ((False, expected), (True, expected.T)):
            matrix = blocks.matrix(in_block_order, transposed)
            torch.testing.assert_close(matrix.to_dense(), dense)
            rows = torch.repeat_interleave(torch.arange(matrix.size(0)), matrix.crow_indices().diff())
            columns = matrix.col_indices()
            assert torch.all((rows[1:] > rows[:-1]) | (columns[1:] >= columns[:-1])), "sorted columns per row"


def test_layers_of_different_head_counts_share_one_adjacency_in_both_directions():
    """GNNClassifier builds one Adjacency per batch: its flip and its head blocks are built once and reused by
    every layer, whatever each layer's head count."""
    batch = graphs_of_different_sizes()
    adjacency = Adjacency.from_edge_index(batch.edge_index, batch.num_nodes)
    for heads in (2, 1, 3, 2):
        theirs, ours = pair({"heads": heads})
        for direction, edges in ((adjacency, batch.edge_index), (adjacency.flip(), batch.edge_index.flip(0))):
            torch.testing.assert_close(ours(batch.x, direction), theirs(batch.x, edges), **TOL)
    assert adjacency.flip() is adjacency.flip()
    assert adjacency.blocks(2) is adjacency.blocks(2) and adjacency.blocks(2).heads == 2


def test_a_graph_without_edges_gives_the_root_weight_alone():
    theirs, ours = pair({"heads": 2})
    batch = Data(x=torch.randn(4, 6), edge_index=torch.empty(2, 0, dtype=torch.long))
    assert_same(theirs, ours, batch)


def test_attention_weights_come_back_in_the_callers_edge_order():
    theirs, ours = pair({"heads": 2})
    batch = graphs_of_different_sizes()
    _, (edges_theirs, alpha_theirs) = theirs(batch.x, batch.edge_index, return_attention_weights=True)
    _, (edges_ours, alpha_ours) = ours(batch.x, batch.edge_index, return_attention_weights=True)
    assert torch.equal(edges_ours, edges_theirs)
    torch.testing.assert_close(alpha_ours, alpha_theirs, **TOL)


def test_mixed_precision_runs_and_stays_close_to_float32():
    theirs, ours = pair({"heads": 2, "concat": False})
    batch = graphs_of_different_sizes()
    reference, _ = outputs_and_gradients(theirs, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, grads = outputs_and_gradients(ours, batch)
    torch.testing.assert_close(out.float(), reference, rtol=0.05, atol=0.05)
    assert all(torch.isfinite(grad).all() for grad in grads.values())


def test_edge_features_are_refused_with_a_pointer_to_pygs_class():
    with pytest.raises(ValueError, match="edge_dim is not supported.*torch_geometric.nn.TransformerConv"):
        SparseTransformerConv(6, 8, edge_dim=3)


def test_state_dicts_load_both_ways_and_the_same_seed_gives_the_same_weights():
    torch.manual_seed(3)
    theirs = TransformerConv(6, 8, heads=2, beta=True)
    torch.manual_seed(3)
    ours = SparseTransformerConv(6, 8, heads=2, beta=True)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    for name, tensor in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name
    other = TransformerConv(6, 8, heads=2, beta=True)
    other.load_state_dict(SparseTransformerConv(6, 8, heads=2, beta=True).state_dict())  # strict, the other way


DEFAULT_MODEL = {"conv": SparseTransformerConv, "conv_kwargs": {"heads": 2, "concat": False},
                 "hidden_channels": [16, 16], "directions": "both", "graph_features": True, "pooling": "mean"}


@pytest.mark.parametrize("name", ["train.yaml", "train_ddp.yaml", "train_quantumgrav_jl.yaml"])
def test_the_shipped_configs_use_the_sparse_layer(name):
    config = QG.load_config(CONFIGS / name)
    assert config["model"]["conv"] is SparseTransformerConv


def test_a_checkpoint_of_the_old_default_model_loads_and_predicts_the_same(tiny_config):
    old_model = {**DEFAULT_MODEL, "conv": TransformerConv}
    config = tiny_config({f"model.{key}": value for key, value in old_model.items()} | {"training.num_epochs": 1})
    trainer = QG.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    state = QG.runs.checkpoint_files.load_checkpoint(trainer.run_dir / "checkpoints" / "best.pt")
    widths = trainer.core_model.convs[0].forward_conv.in_channels, trainer.core_model.head[-1].out_features
    trainer.close()
    batch = next(iter(val_loader))
    old = build_model(config["model"], *widths)
    new = build_model({**config["model"], "conv": SparseTransformerConv}, *widths)
    old.load_state_dict(state["model"])
    new.load_state_dict(state["model"])  # strict: every name and shape matches
    old.eval(), new.eval()
    with torch.no_grad():
        torch.testing.assert_close(new(batch), old(batch), **TOL)
