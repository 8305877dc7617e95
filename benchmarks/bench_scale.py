#!/usr/bin/env python3
"""Training at real sizes (issue 24). This file holds the ``balance`` table (batches by size, issue 24 §2):

    python benchmarks/bench_scale.py --tables balance --nproc 2 --samples 64 --batch-size 2 --epochs 2

On causal sets whose N ranges from ``--n-min`` to ``--n-max`` (64 to 1,024), ``--nproc`` gloo processes train the
default model (configs/train.yaml) for ``--epochs`` epochs, once with ``training.batch_budget`` (edges: ``--batch-size``
times the data's mean edges per set, or the largest set's if that is more: every set must fit) and once with
fixed-count batches (DistributedSampler) of the budget's mean graphs per batch, so that both take about the same
steps. Each step is timed in two parts: the rank's own
work (loading, forward, backward) and its gradient all-reduce, done explicitly after the backward (the same reduce
DDP does inside it): the time in the all-reduce is the time the rank waited for the slowest rank of the step, plus
the transfer itself. graphs/s: the job's training graphs (padding included) over the slowest rank's epoch time.
The peak RSS of each process is measured too (keep it under your machine's memory / nproc: the default model's
TransformerConv needs about 0.7 GB per 1,024-element set in a batch on the CPU).

Results are printed as a table and stored as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

import QuantumGrav as QG

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- balance (issue 24 §2)
SPRINKLINGS = ["minkowski_2d", "minkowski_3d", "minkowski_4d"]


def balance_config(workdir: str, samples: int, n_min: int, n_max: int, classes: list[str]) -> dict:
    return QG.load_config(REPO / "configs/train.yaml", {
        "training.device": "cpu", "training.path": f"{workdir}/runs", "data.root": f"{workdir}/data",
        "data.num_samples": samples, "data.n_min": n_min, "data.n_max": n_max, "data.storage": "disk",
        "data.classes": classes, "data.split": [0.9, 0.05, 0.05]})


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))


def _balance_loader(dataset, sizes, mode: str, batch_size: int, edge_budget: int, rank: int, world: int, seed: int):
    from torch.utils.data import DistributedSampler
    from torch_geometric.loader import DataLoader

    from QuantumGrav.batching import BatchBudget, DistributedBudgetBatchSampler

    if mode == "fixed":
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler), sampler
    batches = DistributedBudgetBatchSampler(sizes, BatchBudget(edges=edge_budget), rank, world, seed)
    return DataLoader(dataset, batch_sampler=batches), batches


def _balance_epoch(model, optimizer, loader, world: int) -> dict:
    """One epoch; each step's own work (loading, forward, backward, optimizer) and its all-reduce timed apart."""
    work = wait = 0.0
    graphs = edges = steps = 0
    started = last = time.perf_counter()
    for batch in loader:
        loss = torch.nn.functional.cross_entropy(model(batch), batch.y.view(-1))
        loss.backward()
        computed = time.perf_counter()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)  # what DDP's backward does: every rank waits here for the slowest
        reduced = time.perf_counter()
        offset = 0
        for p in model.parameters():
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p) / world)
            offset += p.numel()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        work, wait = work + (computed - last), wait + (reduced - computed)
        last = time.perf_counter()
        work += last - reduced
        graphs, edges, steps = graphs + batch.num_graphs, edges + batch.edge_index.size(1), steps + 1
    return {"steps": steps, "graphs": graphs, "edges": edges, "work_s": work, "wait_s": wait,
            "wall_s": time.perf_counter() - started}


def _balance_worker(rank: int, world: int, port: int, results, config: dict, batch_size: int, edge_budget: int,
                    epochs: int) -> None:
    """One rank: each epoch once with fixed-count batches and once with the budget, alternating, so that a
    change of the machine's load falls on both alike."""
    from QuantumGrav.batching import graph_sizes
    from QuantumGrav.distributed import Runtime
    from QuantumGrav.models import build_model

    torch.set_num_threads(1)
    QG.initialize_ddp(rank, world, master_port=port, backend="gloo", timeout_s=1800)
    try:
        training = config["training"]
        dataset = QG.CausalSetDataset.from_config(config["data"])
        train = dataset.index_select(QG.split_indices(len(dataset), config["data"]["split"], 0)[0])
        sizes = graph_sizes(train, Runtime(rank=rank, world_size=world))
        torch.manual_seed(training["seed"])
        model = build_model(config["model"], train[0].x.size(1), dataset.num_classes)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loaders = {mode: _balance_loader(train, sizes, mode, batch_size, edge_budget, rank, world, training["seed"])
                   for mode in ("fixed", "budget")}
        measured: dict[str, list] = {mode: [] for mode in loaders}
        for epoch in range(epochs):
            for mode, (loader, sampler) in loaders.items():
                sampler.set_epoch(epoch)
                measured[mode].append({"epoch": epoch, **_balance_epoch(model, optimizer, loader, world)})
        results.put((rank, {"epochs": measured, "peak_rss_mb": _peak_rss_mb()}))
    except Exception as err:  # noqa: BLE001 - the parent prints it
        results.put((rank, {"error": f"{type(err).__name__}: {err}"}))
    finally:
        QG.cleanup_ddp()


def _spawn(target, world: int, *args) -> dict[int, dict]:
    from QuantumGrav.distributed import worker_context

    context = worker_context()
    results, port = context.Queue(), QG.find_free_port()
    processes = [context.Process(target=target, args=(rank, world, port, results, *args)) for rank in range(world)]
    for process in processes:
        process.start()
    collected = dict(results.get() for _ in range(world))
    for process in processes:
        process.join()
    errors = [f"rank {r}: {v['error']}" for r, v in collected.items() if "error" in v]
    if errors:
        raise RuntimeError("; ".join(errors))
    return collected


def measure_balance(nproc: int, samples: int, n_min: int, n_max: int, batch_size: int, epochs: int,
                    workdir: str, classes: list[str]) -> dict:
    """Both modes on the same data: per-rank work and all-reduce wait per epoch, graphs/s, peak RSS."""
    from QuantumGrav.batching import BatchBudget, pack_by_size

    config = balance_config(workdir, samples, n_min, n_max, classes)
    dataset = QG.CausalSetDataset.from_config(config["data"])  # generate once, outside the timing
    sizes = dataset.graph_sizes()[QG.split_indices(len(dataset), config["data"]["split"], 0)[0]]
    # The budget: batch_size sets of mean size, or the largest set if that is more (every set must fit);
    # the fixed count: the budget's mean graphs per batch, so that both modes take about the same steps.
    edge_budget = max(int(batch_size * sizes[:, 1].mean()), int(sizes[:, 1].max()))
    fixed_batch = max(1, round(len(sizes) / len(pack_by_size(sizes, BatchBudget(edges=edge_budget), 0))))
    ranks = _spawn(_balance_worker, nproc, config, fixed_batch, edge_budget, epochs)
    rows = []
    for mode in ("fixed", "budget"):
        per_epoch = [[ranks[r]["epochs"][mode][e] for r in range(nproc)] for e in range(epochs)]
        rows.append({
            "mode": mode, "batch": f"{fixed_batch} graphs" if mode == "fixed" else f"edges <= {edge_budget}",
            "steps_per_rank": per_epoch[0][0]["steps"],
            "graphs_per_s": statistics.mean(sum(r["graphs"] for r in ep) / max(r["wall_s"] for r in ep)
                                            for ep in per_epoch),
            "wait_s_per_rank_epoch": [statistics.mean(per_epoch[e][r]["wait_s"] for e in range(epochs))
                                      for r in range(nproc)],
            "work_s_per_rank_epoch": [statistics.mean(per_epoch[e][r]["work_s"] for e in range(epochs))
                                      for r in range(nproc)],
            "epoch_s": statistics.mean(max(r["wall_s"] for r in ep) for ep in per_epoch),
            "epochs": per_epoch})
    return {"nproc": nproc, "samples": samples, "n_min": n_min, "n_max": n_max, "classes": classes,
            "fixed_batch": fixed_batch,
            "edge_budget": edge_budget, "epochs": epochs, "set_edges": {"mean": float(sizes[:, 1].mean()),
                                                                          "max": int(sizes[:, 1].max())},
            "peak_rss_mb": [ranks[r]["peak_rss_mb"] for r in range(nproc)], "rows": rows}


def print_balance(result: dict) -> None:
    print(f"\nbalance: {result['nproc']} gloo processes, {result['samples']} sets of N {result['n_min']}-"
          f"{result['n_max']} (edges per set: mean {result['set_edges']['mean']:.0f}, max "
          f"{result['set_edges']['max']}), default model, mean of {result['epochs']} epochs")
    print(f"| {'batches':<20} | steps/rank | graphs/s | epoch s | wait at all-reduce s per rank | "
          f"own work s per rank |")
    print("|---|---:|---:|---:|---|---|")
    for row in result["rows"]:
        listed = [" / ".join(f"{v:.1f}" for v in row[key]) for key in ("wait_s_per_rank_epoch",
                                                                          "work_s_per_rank_epoch")]
        print(f"| {row['mode'] + ': ' + row['batch']:<20} | {row['steps_per_rank']} | {row['graphs_per_s']:.2f} | "
              f"{row['epoch_s']:.1f} | {listed[0]} | {listed[1]} |")
    print("peak RSS per process (both modes): " + " / ".join(f"{v:.0f} MB" for v in result["peak_rss_mb"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=["balance"], choices=["balance"])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--n-min", type=int, default=64)
    parser.add_argument("--n-max", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--classes", nargs="+", default=SPRINKLINGS,
                        help="generator classes (default: the sprinklings; destroyed and layered sets of N <= 1,024 "
                             "reached 114,636 links; a fixed batch of 8 sets of all classes peaked at 6.7 GB)")
    parser.add_argument("--workdir", default=None, help="keep the data here (default: a temporary folder)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results_scale_balance.json"))
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        result = measure_balance(args.nproc, args.samples, args.n_min, args.n_max, args.batch_size, args.epochs,
                                 workdir, args.classes)
    print_balance(result)
    Path(args.out).write_text(json.dumps({"balance": result, "load_average": os.getloadavg(),
                                          "command": "python benchmarks/bench_scale.py " + " ".join(
                                              f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                                              if k in ("nproc", "samples", "n_min", "n_max", "batch_size",
                                                       "epochs"))}, indent=2) + "\n")
    print(f"\nstored in {args.out}; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
