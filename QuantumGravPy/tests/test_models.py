"""The GNN's options: messages in both directions along the order, and the hybrid head with the invariants."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINEConv, GraphConv

import QuantumGrav as QG
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.derived_invariants import invariants_of_edges
from QuantumGrav.models.gnn import BidirectionalConv
from QuantumGrav.tasks.multiclass import MulticlassTask
from QuantumGrav.training.model_builder import build_model, check_model_forward
from conftest import ALL_RESULTS

NUM_FEATURES = len(cs.NODE_FEATURES)


def two_element_chain(x: torch.Tensor) -> Data:
    """Element 0 precedes element 1: one edge, past -> future."""
    return Data(x=x, edge_index=torch.tensor([[0], [1]]), invariants=torch.ones(1, len(cs.INVARIANT_NAMES)))


def test_bidirectional_conv_sends_messages_against_the_order_with_its_own_weights():
    torch.manual_seed(0)
    forward_only = GraphConv(3, 4)
    both = BidirectionalConv(GraphConv(3, 4), GraphConv(3, 4))
    x, changed_future = torch.randn(2, 3), torch.randn(2, 3)
    changed_future[0] = x[0]
    edges = two_element_chain(x).edge_index
    assert torch.equal(forward_only(x, edges)[0], forward_only(changed_future, edges)[0]), \
        "past -> future only: the past element never hears from its future"
    assert not torch.allclose(both(x, edges)[0], both(changed_future, edges)[0])
    assert both.forward_conv.lin_rel.weight.data_ptr() != both.backward_conv.lin_rel.weight.data_ptr()


def test_hybrid_head_reads_the_invariants_and_the_plain_model_ignores_them():
    torch.manual_seed(1)
    hybrid = build_model({"directions": "both", "graph_features": True}, NUM_FEATURES, 5).eval()
    plain = build_model({}, NUM_FEATURES, 5).eval()
    graph = two_element_chain(torch.randn(2, NUM_FEATURES))
    other = graph.clone()
    other.invariants = 3 * torch.randn(1, len(cs.INVARIANT_NAMES))
    batch, other_batch = Batch.from_data_list([graph]), Batch.from_data_list([other])
    assert not torch.allclose(hybrid(batch), hybrid(other_batch))
    assert torch.equal(plain(batch), plain(other_batch))
    hybrid.train()
    assert hybrid(batch).shape == (1, 5), "a training batch of one graph uses the running statistics"


def test_the_constructors_defaults_are_the_default_jobs_model():
    """GNNClassifier(in_channels, num_classes) is the model of configs/train.yaml but for its invariants, which
    depend on the data (graph_features: the number of features, 0 unless build_model is given the data's)."""
    from QuantumGrav.models.gnn import GNNClassifier

    model_section = QG.load_config(None)["model"]
    direct, built = GNNClassifier(NUM_FEATURES, 5), build_model({**model_section, "graph_features": False}, NUM_FEATURES, 5)
    assert str(direct) == str(built)  # the same layers, of the same sizes
    assert {k: v.shape for k, v in direct.state_dict().items()} == {k: v.shape for k, v in built.state_dict().items()}
    # another layer without conv_kwargs gets none (heads=2 would be GraphConv's error)
    assert isinstance(GNNClassifier(NUM_FEATURES, 5, conv=GraphConv).convs[0].forward_conv, GraphConv)


def test_the_model_sections_defaults_are_written_once_in_gnn_classifier(monkeypatch):
    """The config's model section has no defaults of its own for the built-in model: a default changed in
    GNNClassifier's signature (or DEFAULT_CONV_KWARGS) is the config's default, in a loaded config and in a
    section built without one."""
    from QuantumGrav.config import layout
    from QuantumGrav.config.sections.model import ModelSection
    from QuantumGrav.models import gnn

    kwdefaults = {**gnn.GNNClassifier.__init__.__kwdefaults__, "dropout": 0.25, "hidden_channels": (16, 8),
                  "conv": GraphConv, "directions": "forward"}
    monkeypatch.setattr(gnn.GNNClassifier.__init__, "__kwdefaults__", kwdefaults)
    monkeypatch.setattr(gnn, "DEFAULT_CONV_KWARGS", {"aggr": "max"})
    layout._layout.cache_clear()  # the config's layout, and so its defaults, is read once per process
    try:
        loaded, built = QG.load_config(None)["model"], ModelSection()
    finally:
        layout._layout.cache_clear()
    assert {k: loaded[k] for k in ("dropout", "hidden_channels", "conv", "directions", "conv_kwargs")} == \
        {"dropout": 0.25, "hidden_channels": [16, 8], "conv": GraphConv, "directions": "forward",
         "conv_kwargs": {"aggr": "max"}}
    assert (built.dropout, built.hidden_channels, built.conv, built.conv_kwargs) == \
        (0.25, (16, 8), GraphConv, {"aggr": "max"})


def test_gnn_classifier_named_as_model_type_is_built_as_any_named_class():
    """model.type: QuantumGrav.models.gnn.GNNClassifier is built as type(in, out, **model.kwargs), as every named
    class is, and the keys conv to graph_features do not apply (the trainer then derives no invariants: built
    with the config's graph_features, it failed on a user's sets of x, edge_index and y)."""
    model_section = {**QG.load_config(None)["model"], "type": QG.GNNClassifier, "kwargs": {"hidden_channels": [8]}}
    model = build_model(model_section, 3, 4)
    assert model.graph_norm is None and [conv.forward_conv.out_channels for conv in model.convs] == [8]
    item = Data(x=torch.rand(3, 3), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([1]))
    check_model_forward(model, item, MulticlassTask(4), model_section, torch.device("cpu"))


def test_default_config_model_trains_end_to_end_and_reports_the_baselines(tiny_config):
    config = tiny_config({"model.directions": "both", "model.graph_features": True, "training.num_epochs": 2,
                          "testing.strongest_baseline": True, **ALL_RESULTS})
    trainer = QG.Trainer(config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    test = trainer.run_test(test_loader)
    summary = json.loads((trainer.run_dir / "summary.json").read_text())
    trainer.close()
    assert 0.0 <= summary["baseline_accuracy"] <= 1.0 and 0.0 <= summary["strong_baseline_accuracy"] <= 1.0
    assert "gradient boosting" in summary["strong_baseline_method"]
    assert len(summary["baselines"]["strong"]["per_class_recall"]) == trainer.dataset.num_classes
    assert 0.0 <= summary["strongest_baseline_accuracy"] <= 1.0 and 0.0 <= summary["strong_baseline_balanced_accuracy"]
    assert "2D-order test" in summary["strongest_baseline_method"]
    assert 0.0 <= summary["test_balanced_accuracy"] <= 1.0 and "test_roc_auc" not in summary  # 5 classes: no ROC
    lines = QG.runs.records.summarise_run({"summary": summary, "test": test}).splitlines()
    assert any(line.startswith("strong baseline  accuracy") for line in lines)
    assert any(line.startswith("strongest baseline  accuracy") for line in lines)


# --------------------------------------------------------------------------- the check of the first item
CPU = torch.device("cpu")
DEFAULT_MODEL = {"directions": "both", "graph_features": True}  # configs/train.yaml's


def users_item() -> Data:
    """A three-element chain as a user's dataset gives it: x, edge_index, y and nothing else."""
    return Data(x=torch.randn(3, NUM_FEATURES), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([0]))


def test_the_first_item_check_says_what_the_default_model_needs_and_what_the_item_has():
    model, item, task = build_model(DEFAULT_MODEL, NUM_FEATURES, 3), users_item(), MulticlassTask(3)
    has = r"x float32 \[3, 10\], edge_index int64 \[2, 2\], y int64 \[1\]"
    with pytest.raises(QG.ConfigError, match=rf"^model.graph_features: the model's head reads each causal set's order "
                                             rf"invariants \(invariants, \[1, 15\]\), but the item has none \({has}\); "
                                             rf".*or set model.graph_features: false$"):
        check_model_forward(model, item, task, DEFAULT_MODEL, CPU)
    item.invariants = torch.ones(1, 4)
    with pytest.raises(QG.ConfigError, match=r"invariants .* per causal set, but the item's invariants are \[1, 4\]"):
        check_model_forward(model, item, task, DEFAULT_MODEL, CPU)
    item.invariants = invariants_of_edges(item.edge_index, 3)
    assert model.training
    check_model_forward(model, item, task, DEFAULT_MODEL, CPU)
    assert model.training, "the model is left in the mode it was in"


def test_a_failed_forward_pass_says_what_the_built_in_model_needs_and_what_the_item_has():
    config = {"conv": GINEConv}
    with pytest.raises(QG.ConfigError, match=r"^model: a forward pass on one causal set failed \(.*\); the built-in "
                                             r"model passes its layers \(model.conv\) x \(float \[nodes, features\]\) "
                                             r"and edge_index \(long \[2, edges\]\) only, no edge features; the item has "
                                             r"x float32 \[3, 10\], edge_index int64 \[2, 2\], y int64 \[1\]$"):
        check_model_forward(build_model(config, NUM_FEATURES, 2), users_item(), MulticlassTask(2), config, CPU)


def test_a_device_out_of_memory_in_the_first_forward_pass_is_not_called_a_config_error():
    class Hungry(torch.nn.Module):
        def forward(self, batch):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        check_model_forward(Hungry(), users_item(), MulticlassTask(2), {"type": Hungry}, CPU)


def test_upstreams_gcn_reads_the_link_degrees_as_counts_and_gives_one_output_per_set():
    from torch_geometric.data import Batch, Data

    from QuantumGrav.data import causal_sets as cs
    from QuantumGrav.models.upstream_gcn import UpstreamGCN

    graphs = []
    for n, seed in ((12, 0), (20, 1)):
        R = cs.sprinkle_diamond(n, 2, np.random.default_rng(seed))[1]
        links = cs.transitive_reduction(R)
        graphs.append(Data(x=torch.from_numpy(cs.node_features(R)), num_nodes=n,
                           edge_index=torch.from_numpy(np.stack(np.nonzero(links))).long()))
    batch = Batch.from_data_list(graphs)
    model = UpstreamGCN(len(cs.NODE_FEATURES), 1).eval()
    seen = []
    model.blocks[0].conv.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    assert model(batch).shape == (2, 1)
    in_degrees = torch.cat([torch.from_numpy(cs.transitive_reduction(cs.sprinkle_diamond(n, 2, np.random.default_rng(
        seed))[1]).sum(0)).float() for n, seed in ((12, 0), (20, 1))])
    assert torch.allclose(seen[0][:, 0], in_degrees), "in-link degrees as counts, as upstream feeds them"
    with pytest.raises(ValueError, match="feature_columns: expected columns of the 10 node features, got \\[2, 10\\]"):
        UpstreamGCN(10, 1, feature_columns=[2, 10])
    assert model.blocks[0].norm.momentum == 0.1  # torch's default unless asked
    assert UpstreamGCN(10, 1, batch_norm_momentum=0.2).blocks[0].norm.momentum == 0.2  # upstream's
    with pytest.raises(ValueError, match="batch_norm_momentum: expected a number in \\(0, 1\\], got 0"):
        UpstreamGCN(10, 1, batch_norm_momentum=0)


def test_the_temporary_files_pyg_writes_for_the_models_layers_are_removed_when_the_process_exits(tmp_path):
    """PyG renders each conv class's propagate into a file in the temporary folder and never removes it: a suite or
    a sweep left thousands in /tmp, with their .pyc in /tmp/__pycache__. Built here in a process of its own with its
    own TMPDIR and bytecode caching on: the files exist while it lives (PyG loaded them) and are gone when it has
    exited, their cache too."""
    script = (
        "import os, QuantumGrav.models.gnn as gnn, torch_geometric.nn as pyg\n"
        "gnn.GNNClassifier(4, 1); pyg.GCNConv(4, 4)\n"
        "print(len(os.listdir(os.environ['TMPDIR'])))\n"
    )
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    finished = subprocess.run([sys.executable, "-c", script], env={**environment, "TMPDIR": str(tmp_path)},
                              capture_output=True, text=True, timeout=120)  # bytecode on: its .pyc is PyG's too
    assert finished.returncode == 0, finished.stderr
    assert int(finished.stdout.split()[-1]) >= 2, "PyG wrote no files: the test no longer sees what it guards"
    assert sorted(os.listdir(tmp_path)) == []
