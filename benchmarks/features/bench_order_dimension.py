"""Time per causal set of the exact 2D-order test (``order_dimension``) and of the graph observables
(``graph_observables``); prints a table.

    .venv/bin/python benchmarks/features/bench_order_dimension.py [--sizes 128 512 2048] [--num 4] [--seed 0]
        [--json benchmarks/features/results_order_dimension.json]

For each N, ``--num`` sets of each of five kinds (``data.kinds``: polynomial, grid, destroyed, layered, random;
in the generator's natural labelling) are timed in CPU time (the cost of a set on one core, whatever else runs on
the machine), one process, one torch thread:

* ``is_two_dimensional``: the whole test, certificate and local form included (``two_dimension_violations``);
* ``graph_observables``: link-degree histograms, Laplacian extremes, interval histogram, the product R @ R included.

The goal (issue 47): the test under a second per set at N = 2,048 on one core.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np
import torch

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.kinds.catalogue import generate_kind
from QuantumGrav.common.files import atomic_write_text

KINDS = ("polynomial", "grid", "destroyed", "layered", "random")


def cpu_seconds(work, inputs: list) -> list[float]:
    times = []
    for value in inputs:
        start = time.process_time()  # CPU time: on a shared machine the wall clock measures the other jobs too
        work(value)
        times.append(time.process_time() - start)
    return times


def run(sizes: list[int], num: int, seed: int) -> list[dict]:
    rows = []
    for n in sizes:
        for kind in KINDS:
            rng = np.random.default_rng([seed, n])
            sets = [generate_kind(kind, rng, n=n).relation for _ in range(num)]
            answers = [cs.is_two_dimensional(R) for R in sets]
            for what, work in (("is_two_dimensional", cs.is_two_dimensional), ("graph_observables", cs.graph_observables)):
                seconds = cpu_seconds(work, sets)
                rows.append({"n": n, "kind": kind, "what": what, "mean_s": float(np.mean(seconds)),
                             "max_s": float(np.max(seconds)), "two_dimensional": int(sum(answers)), "num": num})
    return rows


def markdown_table(rows: list[dict]) -> str:
    lines = ["| N | kind | function | mean CPU s | max CPU s | 2D orders |", "|---:|---|---|---:|---:|---:|"]
    lines += [f"| {r['n']} | {r['kind']} | {r['what']} | {r['mean_s']:.3f} | {r['max_s']:.3f} | "
              f"{r['two_dimensional']}/{r['num']} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 2048],
                        help="elements per set (default 128 512 2048)")
    parser.add_argument("--num", type=int, default=4, help="sets per kind and size (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also store the rows in this file (with the command, date and load average)")
    args = parser.parse_args()
    if args.num < 1 or min(args.sizes) < 16:
        parser.error("--num must be >= 1 and every size >= 16")
    torch.set_num_threads(1)  # the product R @ R on one core, as in a DataLoader worker
    load_before = os.getloadavg()
    rows = run(args.sizes, args.num, args.seed)
    print(markdown_table(rows))
    if args.json:
        atomic_write_text(args.json, json.dumps(
            {"command": " ".join(["python", *sys.argv]), "date": datetime.datetime.now(datetime.timezone.utc)
             .isoformat(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
             "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
