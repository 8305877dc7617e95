"""The worker functions of notebook 03 "DDP by hand": plain torch.distributed, written out in full.

They live in a file, not in the notebook, because the worker processes are fresh Python processes:
they find a function by importing its module, and a function defined in a notebook has none
(notebook 04 shows the error). The notebook prints these functions as it uses them (not the code that
starts the processes: ``run_with_torchrun`` runs a script under torchrun, ``start_processes`` is torchrun's
stand-in for the functions of this file).

Each worker runs as ``worker(rank, world_size, port, settings)`` in its own process (``in_process_group``
turns a function of ``(rank, world_size, device, settings)`` into one) and returns a dict; ``start_processes`` (the notebook's stand-in for torchrun) starts them and collects the results
or the first failure, within a bounded wait.
"""

from __future__ import annotations

import datetime
import functools
import gc
import hashlib
import multiprocessing as mp
import os
import queue
import re
import socket
import subprocess
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GraphConv, global_mean_pool

from QuantumGrav import CausalSetDataset, split_indices


# ---------------------------------------------------------------- the process group
def join_process_group(rank: int, world_size: int, port: int, timeout_s: float) -> torch.device:
    """Join the job's process group; return the device this process trains on.

    On GPUs: NCCL, and each process drives GPU ``LOCAL_RANK`` of its node (torchrun sets it; on one
    node it equals the rank). On CPUs: gloo. The timeout bounds every collective: a rank that waits for
    one that never comes fails after ``timeout_s`` instead of PyTorch's default of 30 minutes.
    """
    local_rank = rank  # under torchrun: int(os.environ["LOCAL_RANK"]); rank = int(os.environ["RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before NCCL starts: this process's GPU
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return device


def wrap_in_ddp(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """The model, on its device, in DDP. ``device_ids`` is ``[LOCAL_RANK]``, an integer index of this node's
    GPUs (never the global rank, never a torch.device); on a CPU it must be None."""
    model = model.to(device)  # before wrapping: DDP broadcasts rank 0's weights from here
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def leave_process_group() -> None:
    """Teardown: every rank, also after an error (called in ``finally``)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def in_process_group(work):
    """A worker ``(rank, world_size, port, settings)`` that runs ``work(rank, world_size, device, settings)``
    between joining and leaving the process group.

    The order of teardown matters: every DDP object must be gone *before* the group is destroyed. A
    DDP wrapper freed afterwards destroys the group's last reference with the GIL held while gloo's
    threads need it: the process hangs at exit, in about one run of five. So the work runs in a
    function of its own, whose objects are freed when it returns, and gc.collect() frees those caught
    in reference cycles, while the group still exists.
    """
    @functools.wraps(work)
    def worker(rank: int, world_size: int, port: int, settings: dict) -> dict:
        device = join_process_group(rank, world_size, port, settings["timeout_s"])
        try:
            return work(rank, world_size, device, settings)
        except Exception as err:
            # When it failed, taken before the teardown: leaving the group makes the others fail too.
            err.raised_at = time.monotonic()
            raise
        finally:
            gc.collect()
            leave_process_group()
    return worker


# ---------------------------------------------------------------- data and model
def load_splits(settings: dict) -> tuple[CausalSetDataset, list[int], list[int]]:
    """The library's causal sets (generated once by the notebook, read from its cache here) and the same
    train/validation split on every rank (a function of the seed only)."""
    dataset = CausalSetDataset(settings["data_root"], num_samples=settings["num_samples"],
                               n_min=settings["n_min"], n_max=settings["n_max"], seed=settings["seed"])
    train, val, _test = split_indices(len(dataset), (0.7, 0.15, 0.15), settings["seed"])
    return dataset, train, val


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
    """Everything a rank trains with: its training sampler and loader, its validation shard, the model
    in DDP and the optimizer."""
    dataset, train, val = load_splits(settings)
    # Every rank draws the same permutation (seed + epoch) and keeps every world_size-th item from its rank.
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=settings["seed"])
    train_loader = DataLoader(dataset[train], batch_size=settings["batch_size"], sampler=sampler)
    # Validation: disjoint shards, no padding (a DistributedSampler would repeat graphs to even them out).
    val_loader = DataLoader(dataset[val[rank::world_size]], batch_size=settings["batch_size"])
    torch.manual_seed(settings["seed"])  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = wrap_in_ddp(SmallGNN(dataset.num_features, settings["hidden"], dataset.num_classes), device)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
    return sampler, train_loader, val_loader, model, optimizer


# ---------------------------------------------------------------- one epoch, validation, one decision
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
    """[loss sum, correct predictions, graphs] of this rank's shard."""
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    for batch in loader:
        batch = batch.to(device)
        logits = model(batch)
        totals += torch.stack([F.cross_entropy(logits, batch.y, reduction="sum").double(),
                               (logits.argmax(1) == batch.y).sum().double(),
                               torch.tensor(batch.num_graphs, dtype=torch.float64, device=device)])
    return totals


def exact_validation(model, loader, device) -> dict:
    """Sums and counts all-reduced, then divided: the metrics of one process on the whole split. Next to them,
    the classic mistake: each rank's mean, averaged over the ranks."""
    local = validation_totals(model.module, loader, device)  # the plain module: no DDP collectives here
    totals = local.clone()
    dist.all_reduce(totals)  # SUM over ranks
    local_means = local[:2] / local[2]
    dist.all_reduce(local_means)
    mean_of_means = local_means / dist.get_world_size()
    return {"loss": totals[0].item() / totals[2].item(), "accuracy": totals[1].item() / totals[2].item(),
            "graphs": int(totals[2].item()), "shard_graphs": int(local[2].item()),
            "loss_mean_of_means": mean_of_means[0].item(), "accuracy_mean_of_means": mean_of_means[1].item()}


class EarlyStopping:
    """Stop when the validation loss has not improved by ``min_delta`` for ``patience`` epochs."""

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
    """Rank 0's decision on every rank (the others pass None). NCCL moves CUDA tensors only, hence device."""
    box = [decision if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0, device=device)
    return box[0]


# ---------------------------------------------------------------- the correct worker
@in_process_group
def train(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    sampler, train_loader, val_loader, model, optimizer = build(settings, rank, world_size, device)
    early_stopping = EarlyStopping(settings["patience"], settings["min_delta"]) if rank == 0 else None
    epochs = []
    for epoch in range(settings["epochs"]):
        sampler.set_epoch(epoch)  # a new permutation every epoch (the same on every rank)
        drawn = [sampler.dataset[i] for i in sampler]  # this rank's shard of the epoch, for the figure
        train_one_epoch(model, train_loader, optimizer, device)
        val = exact_validation(model, val_loader, device)
        # Rank 0 decides; every rank gets its decision; all leave the loop together, or none.
        stop = decided_on_rank0(early_stopping.should_stop(val["loss"]) if rank == 0 else None, device)
        epochs.append({"epoch": epoch, "drawn": drawn, **val, "stop": stop})
        if stop:
            break
    # Every rank's fingerprint of its own parameters, gathered on every rank: the copies must be identical.
    checksums = [None] * world_size
    dist.all_gather_object(checksums, parameter_checksum(model.module))
    # As numpy arrays: a torch tensor sent to the notebook would be shared memory of a process about to exit.
    weights = {k: v.cpu().numpy() for k, v in model.module.state_dict().items()} if rank == 0 else None
    return {"epochs": epochs, "left_loop_after_epoch": epoch, "weights": weights, "checksums": checksums}


def parameter_checksum(model: torch.nn.Module) -> dict:
    """A fingerprint of this rank's parameters: how many, their sum in float64, the sha256 of their bytes."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    return {"parameters": flat.numel(), "sum": flat.double().sum().item(),
            "sha256": hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]}


def validate_on_one_process(settings: dict, weights: dict) -> dict:
    """The trained weights evaluated by this process alone on the whole validation split (no process group)."""
    dataset, _train, val = load_splits(settings)
    model = SmallGNN(dataset.num_features, settings["hidden"], dataset.num_classes)
    model.load_state_dict({name: torch.from_numpy(array) for name, array in weights.items()})
    loss_sum, correct, graphs = validation_totals(model, DataLoader(dataset[val], batch_size=64), "cpu").tolist()
    return {"loss": loss_sum / graphs, "accuracy": correct / graphs, "graphs": int(graphs)}


# ---------------------------------------------------------------- the classic failures
@in_process_group
def train_rank0_stops_alone(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    """Early stopping decided on rank 0 alone: rank 0 leaves the loop, rank 1 trains on and waits."""
    sampler, train_loader, val_loader, model, optimizer = build(settings, rank, world_size, device)
    early_stopping = EarlyStopping(settings["patience"], settings["min_delta"])
    for epoch in range(settings["epochs"]):
        sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, device)
        val = exact_validation(model, val_loader, device)
        if rank == 0 and early_stopping.should_stop(val["loss"]):  # BUG: a decision of rank 0 alone
            break
    if rank == 0:
        time.sleep(settings["timeout_s"] + 2)  # stands in for rank 0's work after training (test, files)
    return {"left_loop_after_epoch": epoch}


@in_process_group
def train_without_set_epoch(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    """The correct loop without ``sampler.set_epoch(epoch)``: what each rank draws, epoch by epoch."""
    sampler, train_loader, val_loader, model, optimizer = build(settings, rank, world_size, device)
    epochs = []
    for epoch in range(settings["epochs"]):
        drawn = [sampler.dataset[i] for i in sampler]  # BUG: no set_epoch before it
        train_one_epoch(model, train_loader, optimizer, device)
        epochs.append({"epoch": epoch, "drawn": drawn})
    return {"epochs": epochs}


class TrainerWithoutEpoch:
    """Bug 1 of a TrainerDDP written without safeguards, cut down: its epoch counter is read before it was ever set."""

    def __init__(self, sampler):
        self.sampler = sampler  # BUG: no self.epoch = 0 here

    def start_epoch(self):
        self.sampler.set_epoch(self.epoch)


@in_process_group
def bug_epoch_never_set(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    sampler, *_ = build(settings, rank, world_size, device)
    TrainerWithoutEpoch(sampler).start_epoch()
    return {}


@in_process_group
def bug_device_ids(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    """Bug 2: ``device_ids`` given something else than [LOCAL_RANK] (on a CPU: anything at all)."""
    model = SmallGNN(4, 8, 2).to(device)
    DistributedDataParallel(model, device_ids=[device])  # BUG: a torch.device; on a CPU, None is right
    return {}


@in_process_group
def bug_rank0_validation_data(rank: int, world_size: int, device: torch.device, settings: dict) -> dict:
    """Bug 3: rank 0 alone validates and keeps the history; every rank reads it to decide."""
    sampler, train_loader, val_loader, model, optimizer = build(settings, rank, world_size, device)
    val_history = []  # filled on rank 0 only
    for epoch in range(settings["epochs"]):
        sampler.set_epoch(epoch)
        train_one_epoch(model, train_loader, optimizer, device)
        if rank == 0:
            val_history.append(validation_totals(model.module, val_loader, device))
        if val_history[-1][0] > 1e9:  # BUG: ranks other than 0 have no validation history
            break
    return {"left_loop_after_epoch": epoch}


# ---------------------------------------------------------------- starting the processes
def run_with_torchrun(script: str, nproc: int, wait_s: float) -> str:
    """What ``torchrun --standalone --nproc_per_node=nproc script`` prints; raises if the job fails.

    Each process gets its share of the cores as OMP_NUM_THREADS, as ``QG.launch`` gives it (torchrun
    would otherwise set 1 and print a notice about it).
    """
    threads = max(1, len(os.sched_getaffinity(0)) // nproc) if hasattr(os, "sched_getaffinity") else 1
    job = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                          script], capture_output=True, text=True, timeout=wait_s,
                         env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    if job.returncode != 0:
        raise RuntimeError(f"{script} on {nproc} processes exited with {job.returncode}:\n{job.stderr}")
    return job.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PEER_REPORTS_S = 3.0  # how long the other ranks' reports are awaited after a failure


def _run_rank(worker, rank: int, world_size: int, port: int, settings: dict, results) -> None:
    torch.set_num_threads(1)  # two processes on two cores: one thread each
    try:
        results.put((rank, "ok", worker(rank, world_size, port, settings)))
    except Exception as err:  # reported to the launcher, which stops the others (as torchrun does)
        raised_at = getattr(err, "raised_at", time.monotonic())
        results.put((rank, "failed", f"{type(err).__name__}: {err}", traceback.format_exc(), raised_at))


def start_processes(worker, world_size: int, settings: dict, wait_s: float) -> dict:
    """Run ``worker`` on ``world_size`` new processes; wait at most ``wait_s`` seconds.

    Returns {"results": {rank: result}} when every rank finished, else {"failed_rank", "error",
    "traceback", "seconds"} of the rank that failed first (the others are then stopped) or, when no rank
    failed in time, {"failed_rank": None, "error": "still running ..."}. A rank that fails makes the
    others fail as it leaves the group, and their reports can arrive before its own: so the reports of
    the next ``PEER_REPORTS_S`` seconds are collected too, and the earliest error wins.
    """
    context = mp.get_context("forkserver")  # workers forked from a clean server that imported torch once
    context.set_forkserver_preload(["torch", "torch_geometric", __name__])
    results, port, started = context.Queue(), free_port(), time.monotonic()
    processes = [context.Process(target=_run_rank, args=(worker, rank, world_size, port, settings, results))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    finished, failures, deadline = {}, [], started + wait_s
    try:
        while len(finished) + len(failures) < world_size:
            try:
                rank, status, *report = results.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if status == "ok":
                finished[rank] = report[0]
            else:
                error, trace, raised_at = report
                failures.append({"failed_rank": rank, "error": error, "traceback": trace,
                                 "seconds": raised_at - started})
                deadline = min(deadline, time.monotonic() + PEER_REPORTS_S)
    finally:
        for process in processes:  # a failure or the bounded wait: stop what still runs
            process.join(timeout=30 if len(finished) == world_size else 0)
            if process.is_alive():
                process.terminate()
                process.join()
    if failures:
        return min(failures, key=lambda failure: failure["seconds"])
    if len(finished) < world_size:
        return {"failed_rank": None, "error": f"still running after {wait_s:g} s: stopped", "seconds": wait_s}
    return {"results": dict(sorted(finished.items())), "seconds": time.monotonic() - started}


def first_failure(outcome: dict, name_the_rank: bool = True) -> str:
    """One line for a job that failed: which rank failed first and its error (gloo's source path left out).
    Where every rank raises the same error, which one reports first is chance: ``name_the_rank=False``."""
    if "results" in outcome:
        return "every rank finished"
    error = re.sub(r"^(\w+: )\[[^\]]*\] ", r"\1", outcome["error"])  # "[.../unbound_buffer.cc:78] " is noise
    who = "no rank" if outcome["failed_rank"] is None else f"rank {outcome['failed_rank']}" if name_the_rank \
        else "a rank"
    return f"{who} failed first, after {outcome['seconds']:.0f} s: {error}"


def where_it_failed(outcome: dict) -> str:
    """The last line of this file that the failed rank ran: the function and its source line."""
    frames = re.findall(r'File "[^"]*ddp_by_hand\.py", line \d+, in (\w+)\n\s+(.*)', outcome.get("traceback", ""))
    return f"in {frames[-1][0]}: {frames[-1][1]}" if frames else "outside ddp_by_hand.py"
