"""Writes default_model_44088b4.pt: the default model (16 wide) as commit 44088b4 trained and saved it, with its
logits on a fixed batch, for test_sparse_attention's check that such checkpoints load and predict the same.

    git archive 44088b4 QuantumGravPy/src | tar -x -C /tmp/qg_44088b4
    PYTHONPATH=/tmp/qg_44088b4/QuantumGravPy/src python make_default_model_44088b4.py default_model_44088b4.pt
"""

import sys

import torch
from torch_geometric.data import Batch, Data

import QuantumGrav as QG

generator = torch.Generator().manual_seed(0)
graphs = []
for n, e in ((17, 60), (5, 6), (1, 0), (40, 200)):
    src, dst = torch.randint(0, n, (e,), generator=generator), torch.randint(0, n, (e,), generator=generator)
    lower, upper = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = lower != upper
    edge_index = torch.unique(torch.stack([lower[keep], upper[keep]]), dim=1)
    graphs.append(Data(x=torch.randn(n, 6, generator=generator), edge_index=edge_index,
                       invariants=torch.randn(1, 4, generator=generator)))
batch = Batch.from_data_list(graphs)
torch.manual_seed(1)
kwargs = {"in_channels": 6, "num_classes": 3, "hidden_channels": [16, 16], "graph_features": 4}
model = QG.GNNClassifier(**kwargs).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
for _ in range(3):  # trained a little: weights and batch norm statistics away from their initial values
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(batch), torch.tensor([0, 1, 2, 1])).backward()
    optimizer.step()
model.eval()
with torch.no_grad():
    logits = model(batch)
torch.save({"commit": "44088b4", "model_kwargs": kwargs, "state_dict": model.state_dict(), "x": batch.x,
            "edge_index": batch.edge_index, "batch": batch.batch, "invariants": batch.invariants, "logits": logits},
           sys.argv[1])
