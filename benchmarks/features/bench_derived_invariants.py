"""Time per causal set to derive the order invariants from an edge index (``derived_invariants``); prints a table.

    .venv/bin/python benchmarks/features/bench_derived_invariants.py [--sizes 64 96 128 1000] [--num 60] [--seed 0]
        [--json benchmarks/features/results_derived_invariants.json]

For each N, ``--num`` causal sets (a third each: 2d and 4d sprinklings, random layered orders) are made with
``causal_sets`` and given as a user's dataset gives them: the links, past to future, as an edge index, and
in a random labelling (the order of elements a user's code produced). Timed per set in CPU time (the cost of a
set on one core, whatever else runs on the machine), one process, one torch thread:

* derive from the links: ``invariants_of_edges`` (closure of the links by repeated squaring, cycle check,
  natural relabelling, ``order_invariants``), what a dataset without invariants pays once per item;
* derive from the relations: the same with every relation as an edge (the closure is then one product);
* invariants of the causal matrix: ``order_invariants(R)`` alone, what the generator pays for them at
  generation, so the difference is the cost of starting from edges.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.dataset import past_to_future_edges
from QuantumGrav.data.derived_invariants import invariants_of_edges


def causal_matrices(n: int, num: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``num`` causal matrices of N = n in natural labelling: 2d and 4d sprinklings and layered orders."""
    makers = (lambda: cs.sprinkle_diamond(n, 2, rng)[1], lambda: cs.sprinkle_diamond(n, 4, rng)[1],
              lambda: cs.random_layered_orders(1, n, rng)[0])
    return [makers[k % 3]() for k in range(num)]


def relabelled(R: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    perm = rng.permutation(R.shape[0])
    return R[np.ix_(perm, perm)]


def ms_per_set(work, inputs: list) -> float:
    start = time.process_time()  # CPU time: on a shared machine the wall clock measures the other jobs too
    for value in inputs:
        work(value)
    return 1000 * (time.process_time() - start) / len(inputs)


def run(sizes: list[int], num: int, seed: int) -> list[tuple[int, str, float]]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(seed)
        matrices = causal_matrices(n, num, rng)
        links = [past_to_future_edges(relabelled(cs.transitive_reduction(R), rng)) for R in matrices]
        relations = [past_to_future_edges(relabelled(R, rng)) for R in matrices]
        rows.append((n, "derive from the links (invariants_of_edges)",
                     ms_per_set(lambda edges, n=n: invariants_of_edges(edges, n), links)))
        rows.append((n, "derive from the relations (invariants_of_edges)",
                     ms_per_set(lambda edges, n=n: invariants_of_edges(edges, n), relations)))
        rows.append((n, "invariants of the causal matrix (order_invariants, as at generation)",
                     ms_per_set(cs.order_invariants, matrices)))
    return rows


def markdown_table(rows: list[tuple[int, str, float]], num: int) -> str:
    lines = [f"| N | per causal set ({num} sets: 2d, 4d sprinklings, layered; one process) | CPU ms |",
             "|---:|---|---:|"]
    lines += [f"| {n} | {what} | {ms:.2f} |" for n, what, ms in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 96, 128, 1000],
                        help="elements per set (default 64 96 128 1000)")
    parser.add_argument("--num", type=int, default=60, help="causal sets per size (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also store the rows in this file (with the command, date and load average)")
    args = parser.parse_args()
    if args.num < 1 or min(args.sizes) < 2:
        parser.error("--num must be >= 1 and every size >= 2")
    torch.set_num_threads(1)  # as in a DataLoader worker or one of several ranks on a node
    load_before = os.getloadavg()
    rows = run(args.sizes, args.num, args.seed)
    print(markdown_table(rows, args.num))
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
        import study_results  # written whole or not at all

        study_results.write_json(args.json, {
            "command": " ".join(["python", *sys.argv]), "date": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "num": args.num, "rows": [{"n": n, "what": what, "ms_per_set": ms} for n, what, ms in rows]},
            indent=1)


if __name__ == "__main__":
    main()
