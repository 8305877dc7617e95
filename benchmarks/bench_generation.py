"""Time causal-set generation at fixed N and print a markdown table.

    .venv/bin/python benchmarks/bench_generation.py [--num 10000] [--n 128] [--seed 0]
    .venv/bin/python benchmarks/bench_generation.py --num 20 --n 1024     # large sets: mind the memory

Stages use the public functions of ``QuantumGrav.causal_sets`` on chunks of 128 sets, the
classes of ``DEFAULT_CLASSES`` in equal shares; the last row is the whole generator
(``generate_causal_sets``), which computes the longest chains once for features and invariants.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import numpy as np

from QuantumGrav import causal_sets as cs

CHUNK = 128


def causal_matrices(cset_type: str, batch: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if cset_type in cs.MANIFOLD_CLASSES:
        return cs.sprinkle_diamond_batch(batch, n, cs.MANIFOLD_CLASSES[cset_type], rng)[1]
    if cset_type == "destroyed":
        sprinkled = cs.sprinkle_diamond_batch(batch, n, int(rng.choice(cs.DEFAULT_DIMENSIONS)), rng)[1]
        return cs.destroy_order(sprinkled, cs.DEFAULT_DESTROY_FRACTION, rng)
    return cs.random_layered_orders(batch, n, rng)


def timed(function: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


def chunk_sizes(num: int) -> list[int]:
    return [min(CHUNK, num - start) for start in range(0, num, CHUNK)]


def run(num: int, n: int, seed: int) -> list[tuple[str, int, float]]:
    rng = np.random.default_rng(seed)
    rows, orders = [], []
    per_class = np.array_split(np.arange(num), len(cs.DEFAULT_CLASSES))
    for cset_type, members in zip(cs.DEFAULT_CLASSES, per_class):
        batches, seconds = timed(lambda: [causal_matrices(cset_type, b, n, rng) for b in chunk_sizes(len(members))])
        rows.append((f"causal matrix: {cset_type}", len(members), seconds))
        orders += batches
    links, seconds = timed(lambda: [cs.transitive_reduction(R) for R in orders])
    rows.append(("links (transitive reduction)", num, seconds))
    _, seconds = timed(lambda: [cs.node_features(R, L) for R, L in zip(orders, links)])
    rows.append(("node features", num, seconds))
    _, seconds = timed(lambda: [cs.order_invariants(R) for R in orders])
    rows.append(("order invariants (all of INVARIANT_NAMES, from one product R @ R)", num, seconds))
    _, seconds = timed(lambda: cs.generate_causal_sets(num, n_min=n, n_max=n, seed=seed))
    rows.append(("generate_causal_sets (end to end)", num, seconds))
    return rows


def markdown_table(rows: list[tuple[str, int, float]]) -> str:
    lines = ["| stage | sets | seconds | sets/s | ms per set |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {stage} | {sets} | {seconds:.2f} | {sets / seconds:,.0f} | {1000 * seconds / sets:.2f} |"
              for stage, sets, seconds in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=10000, help="number of causal sets (default 10000)")
    parser.add_argument("--n", type=int, default=128, help="elements per set (default 128)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.num < len(cs.DEFAULT_CLASSES) or args.n < 2:
        parser.error(f"--num must be >= {len(cs.DEFAULT_CLASSES)} and --n >= 2")
    print(f"N = {args.n}, classes {', '.join(cs.DEFAULT_CLASSES)}\n")
    print(markdown_table(run(args.num, args.n, args.seed)))


if __name__ == "__main__":
    main()
