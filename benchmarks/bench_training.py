#!/usr/bin/env python3
"""Training throughput for 1..N processes on this machine (CPU/gloo or CUDA/NCCL), as a table.

    python benchmarks/bench_training.py --nproc 1 2 --epochs 3 --samples 800

Each row is one job started with QG.launch (the launcher users call); graphs/s is the
training throughput of the whole job averaged over the epochs after the first (which
includes start-up costs). A benchmark, not a test: on a 2-core CPU machine DDP mostly shows
its communication overhead; on GPUs it shows the scaling.
"""

import argparse
import statistics
import tempfile
import time

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
    return {"nproc": nproc, "graphs_per_s": statistics.mean(r["graphs_per_s"] for r in later),
            "epoch_s": statistics.mean(r["epoch_time_s"] for r in later), "wall_s": wall,
            "val_accuracy": result["history"][-1]["val_accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=800)
    args = parser.parse_args()
    QG.setup_logging(level="WARNING")
    with tempfile.TemporaryDirectory() as workdir:
        rows = [measure(n, args.epochs, args.samples, workdir) for n in args.nproc]
    print("| processes | graphs/s (train) | epoch (s) | job wall time (s) | final val accuracy |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['nproc']} | {r['graphs_per_s']:.0f} | {r['epoch_s']:.2f} | {r['wall_s']:.1f} | "
              f"{r['val_accuracy']:.3f} |")


if __name__ == "__main__":
    main()
