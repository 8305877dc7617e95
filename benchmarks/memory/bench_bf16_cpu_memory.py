#!/usr/bin/env python3
"""Why a bf16 run's resident memory grows on a CPU: one process training the default DDP job's model with
``training.amp`` off and bf16, its RSS every 20 optimizer steps.

    .venv/bin/python benchmarks/memory/bench_bf16_cpu_memory.py --json benchmarks/memory/results_bf16_cpu_memory.json   # ~3 min

Notebook 05's bf16 run ended with rank 0 at 2.5 times the plain run's RSS, growing every epoch. On a CPU torch's
bf16 matrix products run through oneDNN, which builds and caches a kernel ("primitive") for each new input shape;
a batch of graphs has a new shape at almost every step (its number of elements). Each variant runs in its own
process (``OMP_NUM_THREADS=1``), on the same batches (seed 0, 16 graphs per batch, 2 epochs of
``configs/train_ddp.yaml``'s data), with oneDNN's primitive cache at its default capacity and at 0
(``ONEDNN_PRIMITIVE_CACHE_CAPACITY``): the part of the growth that the cache holds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
VARIANTS = (("off", None), ("bf16", None), ("bf16", "0"))  # (amp, ONEDNN_PRIMITIVE_CACHE_CAPACITY)
EVERY = 20


def measure(amp: str, epochs: int, data_root: str) -> list[float]:
    """This process: train the job's model for ``epochs`` epochs under ``amp``; RSS in MB every EVERY steps."""
    import torch

    import QuantumGrav as QG
    from QuantumGrav.training.memory import MemoryMonitor
    from QuantumGrav.training.optimization import autocast

    torch.manual_seed(0)
    monitor = MemoryMonitor("cpu")  # the RSS that metrics.csv's rss_mb reports
    with tempfile.TemporaryDirectory() as scratch:
        config = QG.load_config(REPO / "configs" / "train_ddp.yaml", {
            "data.root": data_root, "training.path": scratch, "training.batch_size": 16, "training.num_workers": 0})
        trainer = QG.Trainer(config)
        loader = trainer.prepare_dataloaders()[0]
        optimizer = torch.optim.AdamW(trainer.model.parameters(), 1e-3)
        criterion, rss, step = torch.nn.CrossEntropyLoss(), [], 0
        for _ in range(epochs):
            for batch in loader:
                with autocast(amp, "cpu"):
                    loss = criterion(trainer.model(batch), batch.y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                step += 1
                if step % EVERY == 0:
                    rss.append(monitor.snapshot()["rss_mb"])
        trainer.close()
    return rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--data-root", default=str(REPO / "data"), help="where the job's data is (generated once)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--one", nargs=1, help=argparse.SUPPRESS)  # a variant's own process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], args.epochs, args.data_root)))
        return 0
    runs = []
    for amp, capacity in VARIANTS:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
               "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), os.environ.get("PYTHONPATH", "")])}
        env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
        if capacity is not None:
            env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = capacity
        done = subprocess.run([sys.executable, __file__, "--one", amp, "--epochs", str(args.epochs),
                               "--data-root", args.data_root], env=env, capture_output=True, text=True, check=True)
        rss = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({"amp": amp, "primitive_cache_capacity": capacity or "default", "rss_mb_every_20_steps": rss,
                     "first_mb": rss[0], "last_mb": rss[-1], "max_mb": max(rss)})
        print(f"amp {amp:4s} primitive cache {capacity or 'default':7s} RSS MB every {EVERY} steps: "
              + " ".join(f"{value:.0f}" for value in rss), flush=True)
    if args.json:
        import torch

        import study_results  # benchmarks/study_results.py: written whole or not at all

        setup = {"command": "python benchmarks/memory/bench_bf16_cpu_memory.py " + " ".join(sys.argv[1:]),
                 "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                 "machine": platform.processor() or platform.machine(), "batch_size": 16, "epochs": args.epochs}
        study_results.write_json(args.json, {**setup, "runs": runs}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
