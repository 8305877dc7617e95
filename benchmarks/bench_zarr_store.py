"""Items/s read from a QuantumGrav.jl-layout Zarr store, with and without the feature cache; prints a table.

    .venv/bin/python benchmarks/bench_zarr_store.py [--sizes 128 512] [--num 32] [--seed 0]

For each N, ``--num`` 4d sprinklings (``causal_sets.sprinkle_diamond``) are written with
``zarr_store.write_julia_store`` into a temporary folder, then every item is read once in order
(``QuantumGravJLDataset[i]``, one process): features on the fly (``cache=False``), the first
pass with the cache (computes and writes ``<store>.qg_features``) and a second pass (reads it).
Needs the zarr extra (``pip install 'QuantumGrav[zarr]'``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from QuantumGrav import causal_sets as cs
from QuantumGrav.zarr_store import QuantumGravJLDataset, write_julia_store

POLYNOMIAL = 1  # cset_type_encoder code in QuantumGrav.jl/examples/produce_data.jl


def items_per_second(dataset: QuantumGravJLDataset) -> float:
    start = time.perf_counter()
    for index in range(len(dataset)):
        dataset[index]
    return len(dataset) / (time.perf_counter() - start)


def run(sizes: list[int], num: int, seed: int, folder: Path) -> list[tuple[int, str, float]]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(seed)
        matrices = [cs.sprinkle_diamond(n, 4, rng)[1] for _ in range(num)]
        store = write_julia_store(folder / f"polynomial_n{n}.zarr", matrices, [POLYNOMIAL] * num, [True] * num)
        rows.append((n, "on the fly (cache=False)", items_per_second(QuantumGravJLDataset(store, cache=False))))
        rows.append((n, "cache, first pass (computes, writes)", items_per_second(QuantumGravJLDataset(store))))
        rows.append((n, "cache, second pass (reads)", items_per_second(QuantumGravJLDataset(store))))
    return rows


def markdown_table(rows: list[tuple[int, str, float]], num: int) -> str:
    lines = [f"| N | read ({num} items, one process) | items/s |", "|---:|---|---:|"]
    lines += [f"| {n} | {mode} | {rate:,.0f} |" for n, mode, rate in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512], help="elements per set (default 128 512)")
    parser.add_argument("--num", type=int, default=32, help="causal sets per store (default 32)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.num < 1 or min(args.sizes) < 2:
        parser.error("--num must be >= 1 and every size >= 2")
    with tempfile.TemporaryDirectory() as folder:
        print(markdown_table(run(args.sizes, args.num, args.seed, Path(folder)), args.num))


if __name__ == "__main__":
    main()
