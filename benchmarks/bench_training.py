#!/usr/bin/env python3
"""Training throughput for 1..N processes on this machine (CPU/gloo or CUDA/NCCL), and what the loop's
cross-rank stop check costs per optimizer step, as tables.

    python benchmarks/bench_training.py --nproc 1 2 --epochs 3 --samples 800
    python benchmarks/bench_training.py --tables stop-check --nproc 2 --steps 1000

Each row of the first table is one job started with QG.launch (the launcher users call); graphs/s is the
training throughput of the whole job averaged over the epochs after the first (which includes start-up
costs), ms/step an epoch's wall time (training and validation) divided by its optimizer steps per rank. A
benchmark, not a test: on a 2-core CPU machine DDP mostly shows its communication overhead; on GPUs it shows
the scaling.

The second table times the stop check alone in N processes, as the extra time per step of a loop of steps
that do ``--step-ms`` of work each: the blocking check the loop used (all-reduce a flag, read it with
.item() at every step) against ``distributed.StepVotes`` (an asynchronous all-reduce on a gloo group, read
one step later). On CUDA the blocking check also synchronised the host with the GPU at every step, which
this CPU timing does not show.
"""

import argparse
import math
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import QuantumGrav as QG


def measure(nproc: int, epochs: int, samples: int, workdir: str) -> dict:
    config = QG.load_config("configs/train.yaml", {
        "training.num_epochs": epochs, "training.path": f"{workdir}/runs", "training.progress_bar": False,
        "early_stopping.enabled": False, "data.num_samples": samples, "data.root": f"{workdir}/data",
    })
    QG.CausalSetDataset.from_config(config["data"])  # generate once, outside the timing
    started = time.perf_counter()
    result = QG.launch(config, nproc=nproc)
    wall = time.perf_counter() - started
    later = result["history"][1:] or result["history"]
    train = round(samples * config["data"]["split"][0])
    steps = math.ceil(math.ceil(train / nproc) / config["training"]["batch_size"])
    epoch_s = statistics.mean(r["epoch_time_s"] for r in later)
    return {"nproc": nproc, "graphs_per_s": statistics.mean(r["graphs_per_s"] for r in later), "epoch_s": epoch_s,
            "ms_per_step": 1000 * epoch_s / steps, "wall_s": wall, "val_accuracy": result["history"][-1]["val_accuracy"]}


def _work(milliseconds: float, gradients: torch.Tensor) -> None:
    """Stands in for a DDP training step: the CPU busy for about ``milliseconds``, then the gradients'
    all-reduce, which already makes every rank wait for the slowest at every step."""
    until = time.perf_counter() + milliseconds / 1000
    x = torch.ones(64, 64)
    while time.perf_counter() < until:
        x = x @ x / 64
    dist.all_reduce(gradients)


def default_model_parameters() -> int:
    """The parameters of configs/train.yaml's model on the generator's node features (5 classes)."""
    from QuantumGrav import causal_sets
    from QuantumGrav.models import build_model, count_parameters

    model = build_model(QG.load_config("configs/train.yaml")["model"], len(causal_sets.NODE_FEATURES), 5)
    return count_parameters(model)["total_params"]


def time_stop_checks(rank: int, world_size: int, port: int, results, steps: int, step_ms: float,
                     parameters: int) -> None:
    """``steps`` steps of ``step_ms`` of work and a gradient all-reduce (of the default model's parameters):
    without a check, with the old blocking check after each, with StepVotes after each. The overhead of a
    check is its steps' time minus the unchecked steps' time."""
    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo")
    torch.set_num_threads(1)
    try:
        runtime = QG.distributed.Runtime(rank=rank, world_size=world_size, backend="gloo")
        gradients = torch.zeros(parameters)

        def timed(check) -> float:
            dist.barrier()
            started = time.perf_counter()
            for _ in range(steps):
                _work(step_ms, gradients)
                check()
            return (time.perf_counter() - started) / steps

        def blocking() -> None:  # what _after_optimizer_step did before
            flag = torch.tensor([0.0])
            dist.all_reduce(flag)
            bool(flag.item() > 0)

        unchecked = timed(lambda: None)
        old = timed(blocking)
        with runtime.step_votes(timeout_s=60) as votes:
            new = timed(lambda: votes.exchange(False))
        results.put((rank, old - unchecked, new - unchecked))
    finally:
        QG.cleanup_ddp()


def stop_check_table(nprocs: list[int], steps: int, step_ms: float) -> None:
    from QuantumGrav.distributed import worker_context

    parameters = default_model_parameters()
    print(f"Stop check overhead per step of {step_ms:g} ms of work and an all-reduce of {parameters:,} gradients "
          f"({steps} steps; slowest rank):")
    print("| processes | blocking all-reduce + .item() (µs per step) | StepVotes (µs per step) |")
    print("|---:|---:|---:|")
    for nproc in nprocs:
        if nproc < 2:
            continue  # one process exchanges nothing
        context, port = worker_context(), QG.find_free_port()
        results = context.Queue()
        processes = [context.Process(target=time_stop_checks,
                                     args=(r, nproc, port, results, steps, step_ms, parameters))
                     for r in range(nproc)]
        for process in processes:
            process.start()
        rows = [results.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        blocking = max(r[1] for r in rows) * 1e6  # the slowest rank sets the pace
        asynchronous = max(r[2] for r in rows) * 1e6
        print(f"| {nproc} | {blocking:.1f} | {asynchronous:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--tables", nargs="+", choices=("throughput", "stop-check"), default=["throughput", "stop-check"],
                        help="which tables (throughput alone also runs against an older QuantumGrav)")
    parser.add_argument("--steps", type=int, default=1000, help="steps timed per stop check (second table)")
    parser.add_argument("--step-ms", type=float, default=5.0, help="work per step in the second table")
    args = parser.parse_args()
    QG.setup_logging(level="WARNING")
    if "throughput" in args.tables:
        with tempfile.TemporaryDirectory() as workdir:
            rows = [measure(n, args.epochs, args.samples, workdir) for n in args.nproc]
        print("| processes | graphs/s (train) | ms/step | epoch (s) | job wall time (s) | final val accuracy |")
        print("|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['nproc']} | {r['graphs_per_s']:.0f} | {r['ms_per_step']:.1f} | {r['epoch_s']:.2f} | "
                  f"{r['wall_s']:.1f} | {r['val_accuracy']:.3f} |")
        print()
    if "stop-check" in args.tables:
        stop_check_table(args.nproc, args.steps, args.step_ms)


if __name__ == "__main__":
    main()
