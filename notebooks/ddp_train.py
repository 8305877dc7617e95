"""DDP written out with torch.distributed: a small GNN on causal sets, trained by every rank in lockstep.

    torchrun --standalone --nproc_per_node=2 ddp_train.py [SETTINGS.json]

Notebook 03 writes this file from its cells and runs it. Relative paths in the settings are relative to the working
directory; each rank writes what it did to OUT/rank_<rank>.json, and rank 0 the trained weights to OUT/weights.pt.
"""
import datetime
import gc
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GraphConv, global_mean_pool

from QuantumGrav import CausalSetDataset, split_indices

SETTINGS = dict(data_root="_data", num_samples=205, n_min=16, n_max=32, seed=42, epochs=60, patience=3,
                min_delta=0.0, batch_size=16, hidden=32, lr=0.005, timeout_s=120, out="_runs/ddp_train")


def join_process_group(timeout_s: float) -> tuple[int, int, torch.device]:
    """Join the job's process group; return this process's rank, the world size and its device.

    torchrun starts one copy of this script per process and gives each RANK, LOCAL_RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT; init_process_group reads them (init_method "env://"). On GPUs: NCCL, and
    each process drives GPU LOCAL_RANK of its node. On CPUs: gloo. The timeout bounds every collective: a
    rank that waits for one that never comes fails after timeout_s instead of PyTorch's 30 minutes.
    """
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before NCCL starts; LOCAL_RANK, not RANK, indexes this node's GPUs
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size(), device


class SmallGNN(torch.nn.Module):
    """Two graph convolutions, mean pooling, a linear head: a causal set in, class scores out."""

    def __init__(self, in_channels: int, hidden: int, num_classes: int):
        super().__init__()
        self.conv1, self.conv2 = GraphConv(in_channels, hidden), GraphConv(hidden, hidden)
        self.head = torch.nn.Linear(hidden, num_classes)

    def forward(self, batch):
        x = self.conv1(batch.x, batch.edge_index).relu()
        x = self.conv2(x, batch.edge_index).relu()
        return self.head(global_mean_pool(x, batch.batch))


def build(settings: dict, rank: int, world_size: int, device: torch.device):
    """Everything a rank trains with: the training indices, its sampler and loader, its validation shard,
    the model in DDP and the optimizer."""
    # Rank 0 generates the causal sets (or finds them cached); the others wait for its cache at the barrier
    # instead of writing the same files at once.
    if rank != 0:
        dist.barrier()
    dataset = CausalSetDataset(settings["data_root"], num_samples=settings["num_samples"],
                               n_min=settings["n_min"], n_max=settings["n_max"], seed=settings["seed"])
    if rank == 0:
        dist.barrier()
    train, val, _ = split_indices(len(dataset), (0.7, 0.15, 0.15), settings["seed"])
    # Every rank draws the same permutation (seed + epoch) and keeps every world_size-th item from its rank on,
    # padded by repeating a few so that every rank takes the same number of steps.
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=settings["seed"])
    train_loader = DataLoader(dataset[train], batch_size=settings["batch_size"], sampler=sampler)
    # Validation: disjoint shards, no padding (a DistributedSampler would count some graphs twice).
    val_loader = DataLoader(dataset[val[rank::world_size]], batch_size=settings["batch_size"])
    torch.manual_seed(settings["seed"])  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = SmallGNN(dataset.num_features, settings["hidden"], dataset.num_classes).to(device)  # on its device first
    # device_ids: [LOCAL_RANK], an integer index of this node's GPUs (never a torch.device); none on a CPU.
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    return train, sampler, train_loader, val_loader, model, optimizer


def train_one_epoch(model, loader, optimizer, device) -> None:
    model.train()
    for batch in loader:
        batch = batch.to(device)
        loss = F.cross_entropy(model(batch), batch.y)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here: every rank must take part
        optimizer.step()


@torch.no_grad()
def validation_totals(model, loader, device) -> torch.Tensor:
    """[loss sum, correct predictions, graphs] of one rank's shard."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in loader:
        batch = batch.to(device)
        logits = model(batch)
        totals += torch.stack([F.cross_entropy(logits, batch.y, reduction="sum").double(),
                               (logits.argmax(1) == batch.y).sum().double(),
                               torch.tensor(batch.num_graphs, dtype=torch.float64, device=device)])
    return totals


class EarlyStopping:
    """Stop when the validation loss has not improved by min_delta for `patience` epochs in a row."""

    def __init__(self, patience: int, min_delta: float):
        self.patience, self.min_delta = patience, min_delta
        self.best, self.epochs_without_improvement = float("inf"), 0

    def should_stop(self, val_loss: float) -> bool:
        if val_loss < self.best - self.min_delta:
            self.best, self.epochs_without_improvement = val_loss, 0
        else:
            self.epochs_without_improvement += 1
        return self.epochs_without_improvement >= self.patience


def decided_on_rank0(decision: bool | None, device: torch.device) -> bool:
    """Rank 0's decision, on every rank (the others pass None). NCCL moves CUDA tensors only, hence device."""
    box = [decision]
    dist.broadcast_object_list(box, src=0, device=device)
    return box[0]


def parameter_checksum(model: torch.nn.Module) -> dict:
    """A fingerprint of this rank's parameters: how many, their sum in float64, the sha256 of their bytes."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return {"parameters": flat.numel(), "sum": flat.double().sum().item(),
            "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]}


def train(settings: dict, rank: int, world_size: int, device: torch.device) -> dict:
    """The training of one rank; what it did, as a dict. Every DDP object lives and dies in here."""
    train_indices, sampler, train_loader, val_loader, model, optimizer = build(settings, rank, world_size, device)
    early_stopping = EarlyStopping(settings["patience"], settings["min_delta"]) if rank == 0 else None  # rank 0's
    epochs = []
    for epoch in range(settings["epochs"]):
        sampler.set_epoch(epoch)  # a new shuffle every epoch; without it every epoch replays epoch 0's
        drawn = [train_indices[i] for i in sampler]  # the causal sets this rank trains on (for the notebook)
        train_one_epoch(model, train_loader, optimizer, device)
        # Exact validation: each rank's sums and counts, all-reduced (summed over the ranks), then divided.
        local = validation_totals(model.module, val_loader, device)  # the plain module: no DDP collective here
        totals = local.clone()
        dist.all_reduce(totals)
        val_loss, val_accuracy = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
        # One decision: rank 0 applies its early-stopping rule, and every rank receives the outcome.
        stop = decided_on_rank0(early_stopping.should_stop(val_loss) if rank == 0 else None, device)
        if rank == 0:
            print(f"[RANK 0] epoch {epoch:2d}: val loss {val_loss:.4f}, val accuracy {val_accuracy:.3f}", flush=True)
        epochs.append({"epoch": epoch, "loss": val_loss, "accuracy": val_accuracy, "stop": stop, "drawn": drawn,
                       "shard_totals": local.tolist()})
        if stop:
            break  # every rank, after the same epoch
    reason = f"early stopping (patience {settings['patience']})" if stop else f"the {settings['epochs']} epochs"
    print(f"[RANK {rank}] left the loop after epoch {epoch}: {reason}", flush=True)
    checksums = [None] * world_size
    dist.all_gather_object(checksums, parameter_checksum(model))  # every rank gets every rank's fingerprint
    if rank == 0:  # one writer: rank 0 saves the plain model's weights (model.module, not the DDP wrapper)
        torch.save(model.module.state_dict(), Path(settings["out"]) / "weights.pt")
    return {"rank": rank, "world_size": world_size, "epochs": epochs, "left_loop_after_epoch": epoch,
            "stopped_early": stop, "checksums": checksums}


def main() -> int:
    settings = {**SETTINGS, **(json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else {})}
    Path(settings["out"]).mkdir(parents=True, exist_ok=True)
    rank, world_size, device = join_process_group(settings["timeout_s"])
    started, failed = time.monotonic(), False
    try:
        result = train(settings, rank, world_size, device)
        (Path(settings["out"]) / f"rank_{rank}.json").write_text(json.dumps(result))
    except Exception as err:  # which rank failed, where in this file and why: the launcher stops the others
        where = [frame for frame in traceback.extract_tb(err.__traceback__) if frame.filename == __file__][-1]
        print(f"[RANK {rank}] failed after {time.monotonic() - started:.0f} s in {where.name}: {where.line}\n"
              f"[RANK {rank}] {type(err).__name__}: {str(err).splitlines()[0]}", file=sys.stderr, flush=True)
        failed = True
    # Teardown, also after an error, once every DDP object is gone: a DDP wrapper still alive when its group
    # is destroyed can hang the process at exit. train() has returned, so its objects are freed; gc.collect()
    # frees those caught in reference cycles, while the group still exists.
    gc.collect()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
