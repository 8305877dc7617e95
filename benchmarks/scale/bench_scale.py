"""The default model on large causal sets: peak memory, training graphs/s and the share of matrix products,
with PyG's TransformerConv ("before") and QuantumGrav's SparseTransformerConv ("after"); prints tables and
stores them in benchmarks/scale/results_bench_scale.json (one key per table; other tables in the file are kept; a table
also after each of its rows, marked partial, so that a run cut short keeps what it measured).

    nice .venv/bin/python benchmarks/scale/bench_scale.py                          # every table, default sizes
    nice .venv/bin/python benchmarks/scale/bench_scale.py --tables scale --sizes 128 512 --sources generator

Tables (``--tables``, each a self-contained function that returns its rows; ``TABLES`` lists them):

- ``peak``: this machine's matrix-product peak, float32 (a 4096 x 4096 matmul, best of 5, ``--threads``).
- ``scale``: for each N and data source (``generator``: ``CausalSetDataset`` sets of exactly N elements, the
  five default classes; ``zarr``: 4d sprinklings in a QuantumGrav.jl-layout store read by
  ``QuantumGravJLDataset``), the model of configs/train.yaml (3 x 128, 2 heads averaged, both directions,
  invariants in the head) trained with AdamW for ``--steps`` steps after one warm-up step, each
  measurement in a fresh process: peak memory (RSS on CPU, peak allocation on CUDA), the growth over the
  process before the first step (model and one batch loaded), graphs/s (batch / median step time), the share
  of one profiled step (torch.profiler) in matrix products (dense mm/addmm and the sparse SDDMM/SpMM) and
  the operators with the most self time in it (printed below the table, stored as ``top_ops``),
  and the achieved FLOP rate (the model's multiply-adds, counted from its layers' shapes and the batch's
  edges; the same count for both layers, which compute the same function) against the matrix-product
  peak measured in the same process just before (a 2048^2 matmul: on a shared machine the load moves).

  ``--amp off bf16 fp16`` adds a row per precision (autocast, and a gradient scaler for fp16, as
  ``training.amp`` trains).

  A quiet run of N = 1,024 alone (``--tables scale --sizes 1024 --sources generator --json
  benchmarks/scale/results_scale_ops.json``) is what docs/large_data.md quotes for where the default layer's step goes.

- ``balance``: batches by size (``training.batch_budget``) against fixed-count batches under DDP, at
  ``--nproc`` gloo processes on ``--samples`` sprinkled sets of N from ``--n-min`` to ``--n-max``: the time each
  rank waits at the gradient all-reduce per epoch, and graphs/s (see ``measure_balance``); stored in
  benchmarks/scale/results_scale_balance.json.

    nice .venv/bin/python benchmarks/scale/bench_scale.py --tables balance --nproc 2 --samples 64 --balance-batch 2

- ``convs``: every convolution of configs/tune.yaml's study in the default model at N <= 512, batch 4: the
  memory per link and channel tells which layers keep [edges, channels] tensors.

"before" runs PyG's layer at ``--before-batch`` (at N >= 1,024 the default batch of 32 takes over 23 GB):
the first sets of the same data, which for the generator's mixed classes hold fewer links than the 32; compare
per link (KB/link: the growth over the process before its first step per link; links/s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import QuantumGrav as QG

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "scale" / "results_bench_scale.json"
BALANCE_RESULTS = REPO / "benchmarks" / "scale" / "results_scale_balance.json"  # the balance table's runs
LAYERS = {"before": "torch_geometric.nn.TransformerConv", "after": "QuantumGrav.models.sparse_attention.SparseTransformerConv"}
BEFORE_BATCH = {128: 32, 512: 16, 1024: 4, 2048: 1}  # PyG's layer under ~6 GB on the shared 24 GB machine
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::sparse_sampled_addmm",
              "aten::_sparse_csr_mm", "aten::_sparse_mm")
STUDY_CONVS = {  # configs/tune.yaml's convolution choices, and the layer that replaces TransformerConv
    "torch_geometric.nn.GraphConv": {}, "torch_geometric.nn.GINConv": {},
    "torch_geometric.nn.GATv2Conv": {"heads": 2, "concat": False},
    "torch_geometric.nn.TransformerConv": {"heads": 2, "concat": False},
    "QuantumGrav.models.sparse_attention.SparseTransformerConv": {"heads": 2, "concat": False}}
POLYNOMIAL = 1  # cset_type_encoder code in QuantumGrav.jl/examples/produce_data.jl


# --------------------------------------------------------------------------- table: peak
def table_peak(args) -> list[dict]:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    return [{"device": str(device), "threads": args.threads, "size": 4096, "gflops": matmul_gflops(device, 4096)}]


def matmul_gflops(device: torch.device, size: int, repeats: int = 5) -> float:
    """The float32 matrix-product rate of this process's threads: the best of ``repeats`` size^2 products."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / min(times[1:]) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --------------------------------------------------------------------------- table: scale
def table_scale(args) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as folder:
        for source in args.sources:
            for n in args.sizes:
                data = prepare_data(source, n, args.batch, Path(folder))
                for variant in ("before", "after"):
                    for amp in args.amp:
                        batch = min(args.batch, args.before_batch.get(n, 1)) if variant == "before" else args.batch
                        spec = {"source": source, "n": n, "batch": batch, "variant": variant, "data": data,
                                "steps": args.steps, "threads": args.threads, "device": args.device, "amp": amp}
                        row = run_worker(spec)
                        print(_scale_line(row), flush=True)
                        rows.append(row)
                        keep_partial(args, "scale", rows)
    return rows


def prepare_data(source: str, n: int, batch: int, folder: Path) -> str:
    """Writes ``batch`` causal sets of N elements once (features cached), for the workers to read."""
    if source == "generator":
        from QuantumGrav.data.dataset import CausalSetDataset
        CausalSetDataset(folder / "generator", num_samples=batch, n_min=n, n_max=n, seed=0, workers=1)
        return str(folder / "generator")
    from QuantumGrav.data import causal_sets as cs
    from QuantumGrav.data.zarr_store import QuantumGravJLDataset, write_julia_store
    rng = np.random.default_rng(0)
    matrices = [cs.sprinkle_diamond(n, 4, rng)[1] for _ in range(batch)]
    store = write_julia_store(folder / f"sprinklings_n{n}.zarr", matrices, [POLYNOMIAL] * batch,
                              [True] * (batch // 2) + [False] * (batch - batch // 2))
    dataset = QuantumGravJLDataset(store)
    for index in range(len(dataset)):  # fills the feature cache: the workers time training, not features
        dataset[index]
    return str(store)


# --------------------------------------------------------------------------- table: convs
def table_convs(args) -> list[dict]:
    """Every convolution of configs/tune.yaml's study space in the default model (3 x 128, both directions) at
    the largest of ``--sizes`` up to 512, at a small batch: which ones grow with edges x channels."""
    n = max([size for size in args.sizes if size <= 512] or [min(args.sizes)])
    batch = min(args.batch, 4)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as folder:
        data = prepare_data("generator", n, batch, Path(folder))
        for conv, conv_kwargs in STUDY_CONVS.items():
            spec = {"source": "generator", "n": n, "batch": batch, "variant": conv.rsplit(".", 1)[1], "conv": conv,
                    "conv_kwargs": conv_kwargs, "data": data, "steps": 1, "threads": args.threads,
                    "device": args.device}
            row = run_worker(spec)
            print(_scale_line(row), flush=True)
            rows.append(row)
            keep_partial(args, "convs", rows)
    return rows


def run_worker(spec: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"])}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], check=False, env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        return {**{k: spec[k] for k in ("source", "n", "batch", "variant")}, "error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_items(spec: dict) -> tuple[list, int]:
    if spec["source"] == "generator":
        from QuantumGrav.data.dataset import CausalSetDataset
        dataset = CausalSetDataset(spec["data"], num_samples=spec["batch"], n_min=spec["n"], n_max=spec["n"], seed=0,
                                   workers=1)
        return [dataset[i] for i in range(spec["batch"])], dataset.num_classes
    from QuantumGrav.data.zarr_store import QuantumGravJLDataset
    dataset = QuantumGravJLDataset(spec["data"])
    return [dataset[i] for i in range(spec["batch"])], 2


def worker(spec: dict) -> dict:
    """One measurement in this fresh process; prints one JSON line."""
    import QuantumGrav as QG
    from QuantumGrav.config.yaml_io import resolve_pyobject
    from torch_geometric.data import Batch

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    items, num_classes = load_items(spec)
    batch = Batch.from_data_list(items).to(device)
    model_cfg = {**QG.load_config(REPO / "configs" / "train.yaml")["model"],
                 "conv": resolve_pyobject(spec.get("conv") or LAYERS[spec["variant"]])}
    if "conv_kwargs" in spec:
        model_cfg["conv_kwargs"] = spec["conv_kwargs"]
    torch.manual_seed(0)
    model = QG.build_model(model_cfg, batch.x.size(1), num_classes).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=4.46e-3)
    flops = count_flops(model, batch)
    amp = spec.get("amp", "off")  # as training.amp: autocast, and a gradient scaler for fp16
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None

    def step() -> float:
        _sync(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(batch), batch.y.view(-1))
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        _sync(device)
        return time.perf_counter() - start

    # the peak again, in this process just before its steps: the machine's load changes between rows
    peak_here = matmul_gflops(device, 2048, repeats=3)
    rss_before = _rss_mb()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step()  # warm-up: the optimizer's state, the allocator's pools
    times = [step() for _ in range(spec["steps"])]
    peak = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else _peak_rss_mb())
    matmul_share, profiled_s, top_ops = profile_step(step, device)
    step_s = statistics.median(times)
    return {**{k: spec[k] for k in ("source", "n", "batch", "variant", "threads", "device")}, "amp": amp,
            "edges_per_set": batch.edge_index.size(1) / spec["batch"], "peak_mb": peak,
            "growth_mb": peak - (0 if device.type == "cuda" else rss_before),
            "growth_mb_per_graph": (peak - (0 if device.type == "cuda" else rss_before)) / spec["batch"],
            "step_s": step_s, "graphs_per_s": spec["batch"] / step_s, "matmul_share": matmul_share,
            "profiled_step_s": profiled_s, "gflop_per_step": flops / 1e9, "gflops": flops / step_s / 1e9,
            "matmul_peak_gflops": peak_here, "top_ops": top_ops}


SPMM = "aten::addmm (CSR x dense: SpMM)"  # the sparse aggregation: torch.addmm with a CSR matrix


def _operator(event) -> str:
    """The event's operator, with torch.addmm on a CSR matrix (the sparse layer's SpMM) told apart from the
    dense addmm of a Linear layer: both are ``aten::addmm`` to the profiler; only the sparse one reads the
    matrix's row pointers (a child event ``aten::crow_indices``)."""
    if event.name == "aten::addmm" and any(child.name == "aten::crow_indices" for child in event.cpu_children):
        return SPMM
    return event.name


def profile_step(step, device: torch.device, top: int = 6) -> tuple[float, float, list[tuple[str, float]]]:
    """The share of one step's wall time spent in matrix-product operators (their self time, dense and
    sparse), the step's seconds, and the ``top`` operators by self time with their shares (where the rest of
    the step goes; the sparse SpMM under its own name, see ``_operator``)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        seconds = step()
    attribute = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    self_us = Counter()
    for event in prof.events():
        if event.device_type != DeviceType.CPU:  # a CUDA kernel: its time is already its operator's device time
            continue
        self_us[_operator(event)] += getattr(event, attribute)
    matmul_us = sum(us for name, us in self_us.items() if name in MATMUL_OPS or name == SPMM)
    return (matmul_us / 1e6 / seconds, seconds,
            [(name, us / 1e6 / seconds) for name, us in self_us.most_common(top)])


def count_flops(model: torch.nn.Module, batch) -> float:
    """Multiply-adds x 2 of one training step (forward and backward: 3 x the forward's products): every
    Linear's rows x in x out, and each attention layer's scores and aggregation (2 x edges x heads x channels
    each). Elementwise work is not counted: this is the work a matrix-product unit would do."""
    from torch_geometric.nn import TransformerConv
    forward_flops = 0.0

    def linear_hook(module, inputs, output):
        nonlocal forward_flops
        forward_flops += 2 * inputs[0].numel() * module.weight.size(0)

    def attention_hook(module, inputs, output):
        nonlocal forward_flops
        edges = batch.edge_index.size(1)
        forward_flops += 2 * (2 * edges * module.heads * module.out_channels)

    hooks = [m.register_forward_hook(linear_hook) for m in model.modules()
             if type(m).__name__ == "Linear" and getattr(m, "weight", None) is not None and m.weight.dim() == 2]
    hooks += [m.register_forward_hook(attention_hook) for m in model.modules() if isinstance(m, TransformerConv)]
    with torch.no_grad():
        model(batch)
    for hook in hooks:
        hook.remove()
    return 3 * forward_flops


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _layer(row: dict) -> str:
    """The layer of a row, with its precision where it is not float32 ("after bf16")."""
    return row["variant"] + (f" {row['amp']}" if row.get("amp", "off") != "off" else "")


def _scale_line(row: dict) -> str:
    if "error" in row:
        return f"  {row['source']} N={row['n']} {row['variant']} batch {row['batch']}: FAILED {row['error']}"
    return (f"  {row['source']} N={row['n']} {_layer(row)} batch {row['batch']}: {row['graphs_per_s']:.2f} "
            f"graphs/s, peak {row['peak_mb']:.0f} MB, matmul {100 * row['matmul_share']:.0f}%")


# --------------------------------------------------------------------------- printing and storing
def print_peak(rows: list[dict]) -> None:
    for row in rows:
        print(f"\nmatrix-product peak ({row['device']}, {row['threads']} thread(s), float32 {row['size']}^2 matmul): "
              f"{row['gflops']:.1f} GFLOP/s")


def print_convs(rows: list[dict]) -> None:
    print("\n| convolution (default model, both directions) | N | batch | links/set | growth MB/graph "
          "| bytes per link and channel | graphs/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if "error" in row:
            print(f"| {row['variant']} | {row['n']} | {row['batch']} | | failed | | |")
            continue
        per_link = row["growth_mb_per_graph"] * 2**20 / row["edges_per_set"] / 128
        print(f"| {row['variant']} | {row['n']} | {row['batch']} | {row['edges_per_set']:,.0f} "
              f"| {row['growth_mb_per_graph']:,.1f} | {per_link:.1f} | {row['graphs_per_s']:.2f} |")


def print_scale(rows: list[dict]) -> None:
    print("\n| source | N | links/set | layer | batch | peak MB | growth MB/graph | KB/link | graphs/s | links/s "
          "| matmul share | GFLOP/s | of the matmul peak |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if "error" in row:
            print(f"| {row['source']} | {row['n']} | | {row['variant']} | {row['batch']} | failed | | | | | | | |")
            continue
        of_peak = f"{100 * row['gflops'] / row['matmul_peak_gflops']:.0f}%"
        print(f"| {row['source']} | {row['n']} | {row['edges_per_set']:,.0f} | {_layer(row)} | {row['batch']} "
              f"| {row['peak_mb']:,.0f} | {row['growth_mb_per_graph']:,.1f} "
              f"| {row['growth_mb_per_graph'] * 1024 / row['edges_per_set']:.1f} | {row['graphs_per_s']:.2f} "
              f"| {row['graphs_per_s'] * row['edges_per_set']:,.0f} "
              f"| {100 * row['matmul_share']:.0f}% | {row['gflops']:.1f} | {of_peak} |")
    print("\nWhere each step goes: the operators with the most self time in one profiled step, share of the step")
    for row in rows:
        if row.get("top_ops"):
            ops = ", ".join(f"{name} {100 * share:.0f}%" for name, share in row["top_ops"])
            print(f"- {row['source']} N={row['n']} {_layer(row)} batch {row['batch']}, {row['threads']} "
                  f"thread(s): {ops}")


def keep_partial(args, table: str, rows: list[dict]) -> None:
    """The rows measured so far, stored after each one (marked ``partial`` in the table's meta): a run cut by a
    time limit (a cluster job's, a lent GPU's) keeps what it measured; the finished table replaces them."""
    store({table: {"meta": {**args.meta, "partial": True}, "rows": rows}}, args.json)


def store(results: dict, path: Path) -> None:
    """Merges this run's tables into ``path`` (other tables in it stay), written atomically."""
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored.update(results)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(stored, indent=1) + "\n")
    temporary.replace(path)


# --------------------------------------------------------------------------- balance (issue 24 §2)
SPRINKLINGS = ["minkowski_2d", "minkowski_3d", "minkowski_4d"]


def balance_config(workdir: str, samples: int, n_min: int, n_max: int, classes: list[str]) -> dict:
    return QG.load_config(REPO / "configs/train.yaml", {
        "training.device": "cpu", "training.path": f"{workdir}/runs", "data.root": f"{workdir}/data",
        "data.num_samples": samples, "data.n_min": n_min, "data.n_max": n_max, "data.storage": "disk",
        "data.classes": classes, "data.split": [0.9, 0.05, 0.05]})


def _balance_loader(dataset, sizes, mode: str, batch_size: int, edge_budget: int, rank: int, world: int, seed: int):
    from torch.utils.data import DistributedSampler
    from torch_geometric.loader import DataLoader

    from QuantumGrav.data.batching import BatchBudget, DistributedBudgetBatchSampler

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
    from QuantumGrav.data.batching import graph_sizes
    from QuantumGrav.distributed.runtime import Runtime
    from QuantumGrav.training.model_builder import build_model

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
    from QuantumGrav.common.processes import worker_context

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
    from QuantumGrav.data.batching import BatchBudget, pack_by_size

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


def table_balance(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return measure_balance(args.nproc, args.samples, args.n_min, args.n_max, args.balance_batch, args.epochs,
                               args.workdir or tmp, args.classes)


TABLES = {"peak": table_peak, "scale": table_scale, "convs": table_convs, "balance": table_balance}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", choices=sorted(TABLES), default=["peak", "scale", "convs"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--sources", nargs="+", choices=["generator", "zarr"], default=["generator", "zarr"])
    parser.add_argument("--batch", type=int, default=32, help="graphs per step (default 32, the default job's)")
    parser.add_argument("--before-batch", type=json.loads, default=BEFORE_BATCH,
                        help=f"JSON {{N: batch}} for PyG's layer (default {json.dumps(BEFORE_BATCH)})")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--amp", nargs="+", choices=["off", "bf16", "fp16"], default=["off"],
                        help="scale: mixed precision of the steps, as training.amp (one row per value; fp16 needs CUDA)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    balance = parser.add_argument_group("balance", "batches by size against fixed-count batches under DDP")
    balance.add_argument("--nproc", type=int, default=2)
    balance.add_argument("--samples", type=int, default=64)
    balance.add_argument("--n-min", type=int, default=64)
    balance.add_argument("--n-max", type=int, default=1024)
    balance.add_argument("--balance-batch", type=int, default=2,
                         help="the budget: this many sets of mean size (at least the largest set)")
    balance.add_argument("--epochs", type=int, default=2)
    balance.add_argument("--classes", nargs="+", default=SPRINKLINGS,
                         help="generator classes (default: the sprinklings; destroyed and layered sets of N <= 1,024 "
                              "reached 114,636 links; a fixed batch of 8 sets of all classes peaked at 6.7 GB)")
    balance.add_argument("--workdir", default=None, help="keep the balance data here (default: a temporary folder)")
    args = parser.parse_args()
    args.before_batch = {int(k): int(v) for k, v in args.before_batch.items()}
    if args.batch < 1 or args.steps < 1 or args.threads < 1 or min(args.sizes) < 2:
        parser.error("--batch, --steps and --threads must be >= 1 and every size >= 2")
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    meta = {"command": " ".join(sys.argv), "load_average": os.getloadavg(), "torch": torch.__version__,
            "cores": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None}
    args.meta = meta
    results = {}
    if "peak" in args.tables:
        results["peak"] = {"meta": meta, "rows": table_peak(args)}
        print_peak(results["peak"]["rows"])
    if "scale" in args.tables:
        results["scale"] = {"meta": meta, "rows": table_scale(args)}
        print_scale(results["scale"]["rows"])
    if "convs" in args.tables:
        results["convs"] = {"meta": meta, "rows": table_convs(args)}
        print_convs(results["convs"]["rows"])
    if "balance" in args.tables:
        balance = {"meta": meta, **table_balance(args)}
        print_balance(balance)
        store({"balance": balance}, BALANCE_RESULTS)
    results_meta_end = os.getloadavg()
    for table in results.values():
        table["meta"]["load_average_end"] = results_meta_end
    store(results, args.json)


if __name__ == "__main__":
    main()
