"""A first DDP script: a small GNN trained on the library's causal sets, checkpointed and loaded back.

    torchrun --standalone --nproc_per_node=2 notebooks/first_ddp.py   # 2 processes (on GPUs: one per GPU)
    python notebooks/first_ddp.py                                     # 1 process, the same code path
"""
import gc
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GraphConv, global_mean_pool

from QuantumGrav import CausalSetDataset

HERE = Path(__file__).resolve().parent


class SmallGNN(torch.nn.Module):
    def __init__(self, in_channels: int, num_classes: int, hidden: int = 32):
        super().__init__()
        self.conv, self.head = GraphConv(in_channels, hidden), torch.nn.Linear(hidden, num_classes)

    def forward(self, batch):
        return self.head(global_mean_pool(self.conv(batch.x, batch.edge_index).relu(), batch.batch))


# Without torchrun: a job of one process (MASTER_PORT 0: rank 0 picks a free port).
for name, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="0").items():
    os.environ.setdefault(name, value)
rank, local_rank, world_size = (int(os.environ[name]) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)  # before NCCL starts; LOCAL_RANK, not RANK, indexes this node's GPUs
device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
dist.init_process_group("nccl" if device.type == "cuda" else "gloo")  # reads torchrun's variables (env://)

# Rank 0 generates the causal sets; the others wait for its cache instead of writing the same files at once.
if rank != 0:
    dist.barrier()
dataset = CausalSetDataset(HERE / "_data", num_samples=205, n_min=16, n_max=32, seed=42)
if rank == 0:
    dist.barrier()

torch.manual_seed(0)  # DDP copies rank 0's initial weights to every rank; the seed makes the run repeatable
model = SmallGNN(dataset.num_features, dataset.num_classes).to(device)  # on its device before DDP wraps it
model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
# Each rank trains on its own 1/world_size of the sets, padded so that every rank takes the same steps.
sampler = DistributedSampler(dataset, shuffle=True, seed=42)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)

for epoch in range(3):
    sampler.set_epoch(epoch)  # a new shuffle every epoch; without it every epoch replays epoch 0's
    for batch in loader:
        batch = batch.to(device)
        loss = F.cross_entropy(model(batch), batch.y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks here: every rank takes the same step
        optimizer.step()
    last_losses = [None] * world_size  # each rank's loss of its last batch, gathered: one line per epoch
    dist.all_gather_object(last_losses, round(loss.item(), 3))
    if rank == 0:
        print(f"epoch {epoch}: loss of each rank's last batch {last_losses}", flush=True)

# One writer: rank 0 saves the plain model's weights (model.module: no "module." prefix in the names).
checkpoint = HERE / "_runs" / "first_ddp.pt"
if rank == 0:
    checkpoint.parent.mkdir(exist_ok=True)
    torch.save(model.module.state_dict(), checkpoint)
dist.barrier()  # no rank reads the file before rank 0 has written it
# map_location: rank 0 saved from its device, every rank loads onto its own; weights_only: tensors, no code.
loaded = torch.load(checkpoint, map_location=device, weights_only=True)
same = all(torch.equal(loaded[name], tensor) for name, tensor in model.module.state_dict().items())
same_everywhere = torch.tensor(int(same), device=device)
dist.all_reduce(same_everywhere, op=dist.ReduceOp.MIN)  # 1 only if every rank holds the saved weights
if rank == 0:
    print(f"same weights on every rank: {bool(same_everywhere.item())} (world size {world_size})", flush=True)
del model, optimizer  # the DDP wrapper goes before its process group: one outliving it can hang the exit
gc.collect()  # (also the objects held in reference cycles)
dist.destroy_process_group()
