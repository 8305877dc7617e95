"""Time causal-set generation at fixed N and print markdown tables: the stages, and sets/s against workers.

    .venv/bin/python benchmarks/generation/bench_generation.py [--num 10000] [--n 128] [--seed 0]
    .venv/bin/python benchmarks/generation/bench_generation.py --num 20 --n 1024     # large sets: mind the memory
    .venv/bin/python benchmarks/generation/bench_generation.py --num 0 --scaling-num 2048 --scaling-n 64 128 256
    .venv/bin/python benchmarks/generation/bench_generation.py --num 0 --scaling-num 0 --large-n 1024 2048 --large-num 12
    .venv/bin/python benchmarks/generation/bench_generation.py --num 0 --scaling-num 0 --large-n --kinds-n 128 2048 \
        --json benchmarks/generation/results_generation_kinds.json
    .venv/bin/python benchmarks/generation/bench_generation.py --num 0 --scaling-num 0 --large-n --dimensions-n 256 1024 \
        --json benchmarks/generation/results_generation_dimensions.json
    .venv/bin/python benchmarks/generation/bench_generation.py --num 0 --scaling-num 0 --large-n --kinds-workers-n 1024

Stages use the public functions of ``QuantumGrav.data.causal_sets`` on chunks of 128 sets, the
classes of ``DEFAULT_CLASSES`` in equal shares; the last row is the whole generator
(``generate_causal_sets``), which computes the longest chains once for features and invariants.
The large-set table times ``generate_causal_sets`` end to end at each ``--large-n`` (sets of one size, all
classes) with the peak RSS of the process so far.

The second table builds a fresh cache (``CausalSetDataset(..., workers=K, storage="disk")``: generation,
shards, index) of ``--scaling-num`` sets at each N with K = 1, 2, ... up to the usable cores. K > 1 runs a
pool whose workers fork from a fork server that imports the package once per process: that start is timed
first, on its own (a user waits for it once), and is in no row.

The kinds table times each of QuantumGrav.jl's nine kinds (``QuantumGrav.data.kinds``: the relation alone, one
process, one thread) at each ``--kinds-n``: sets/s and CPU seconds per set.

The dimensions table times the kinds sprinkled in d = 2, 3 and 4 (``catalogue.DIMENSIONAL_KINDS``) at each
``--dimensions-n``, with QuantumGrav.jl's drawn defects and with defects of an exact size (destroyed: changed
relations ``EXACT_CHANGES``; merged: block elements ``EXACT_BLOCKS``); and, from draws of QuantumGrav.jl's
default N and ``merged_ambiguous``'s block fraction, the share of its blocks that have the least size, 4.

The kinds-workers table writes the stores of polynomial, destroyed and merged sets in d = 4 with defects of exact
sizes (``write_kind_stores``, the sensitivity study's data) with 1, 2, ... workers: each worker runs one thread
(``processes.use_one_thread``); before it did, each ran a thread per core and the pool oversubscribed them.

``--json FILE`` stores every table with the command, the date and the load average:
``benchmarks/generation/results_generation.json`` is the run that docs/large_data.md quotes.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import resource
import sys
import tempfile
import time
from typing import Callable

import numpy as np

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.dataset import CausalSetDataset
from QuantumGrav.common.files import atomic_write_text
from QuantumGrav.common.processes import usable_cpu_count

CHUNK = 128


def causal_matrices(cset_type: str, batch: int, n: int, rng: np.random.Generator) -> np.ndarray:
    if cset_type in cs.MANIFOLD_CLASSES:
        return cs.sprinkle_diamond_batch(batch, n, cs.MANIFOLD_CLASSES[cset_type], rng)[1]
    if cset_type == "destroyed":
        sprinkled = cs.sprinkle_diamond_batch(batch, n, int(rng.choice(cs.DEFAULT_DIMENSIONS)), rng)[1]
        return cs.destroy_order(sprinkled, cs.DEFAULT_DESTROY_FRACTION, rng)
    return cs.random_layered_orders(batch, n, rng)


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


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


def start_fork_server() -> float:
    """Seconds to start the generation pool's fork server (a two-block cache of tiny sets, two workers)."""
    with tempfile.TemporaryDirectory() as root:
        return timed(lambda: CausalSetDataset(root, num_samples=cs.GENERATION_BLOCK_SIZE + 1, n_min=4, n_max=4,
                                              workers=2, storage="disk"))[1]


def rates_by_workers(sizes: list[int], make) -> list[tuple[int, int, float]]:
    """(N, workers, sets/s) of ``make(root, n, workers)`` (it writes into the fresh folder ``root`` and returns the
    sets it made) at each N, with 1, 2, ... up to the usable cores."""
    rows = []
    for n in sizes:
        for workers in range(1, usable_cpu_count() + 1):
            with tempfile.TemporaryDirectory() as root:
                made, seconds = timed(lambda: make(root, n, workers))
            rows.append((n, workers, made / seconds))
    return rows


def workers_rows(num: int, sizes: list[int], seed: int) -> list[tuple[int, int, float]]:
    return rates_by_workers(sizes, lambda root, n, workers: CausalSetDataset(
        root, num_samples=num, n_min=n, n_max=n, seed=seed, workers=workers, storage="disk").generated_sets)


KINDS_WORKERS_KINDS = ("polynomial", "destroyed", "merged")
KINDS_WORKERS_SIZES = {"destroyed": (16, 256, 4096), "merged": (4, 16, 64)}


def kinds_workers_rows(num_per_kind: int, sizes: list[int], dimension: int,
                       seed: int) -> list[tuple[int, int, int, float]]:
    """(N, d, workers, sets/s) of ``write_kind_stores``: polynomial, destroyed and merged sets in ``dimension``, the
    defects of exact sizes (the sensitivity study's kind of data), written by 1, 2, ... up to the usable cores."""
    from QuantumGrav.data.kinds.stores import write_kind_stores

    def make(root: str, n: int, workers: int) -> int:
        write_kind_stores(root, KINDS_WORKERS_KINDS, num_per_kind, seed, (n, n), workers, dimension,
                          KINDS_WORKERS_SIZES)
        return len(KINDS_WORKERS_KINDS) * num_per_kind

    return [(n, dimension, workers, rate) for n, workers, rate in rates_by_workers(sizes, make)]


def large_rows(num: int, sizes: list[int], seed: int) -> list[tuple[int, int, float, float, float]]:
    """(N, sets, sets/s, CPU seconds per set, peak RSS MB so far) of ``generate_causal_sets`` at each large N, one
    process. The CPU time is the cost of a set on one core, whatever else runs on the machine."""
    rows = []
    for n in sizes:
        cpu_start = time.process_time()
        _, seconds = timed(lambda: cs.generate_causal_sets(num, n_min=n, n_max=n, seed=seed))
        rows.append((n, num, num / seconds, (time.process_time() - cpu_start) / num,
                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    return rows


def kinds_rows(sizes: list[int], seconds_per_cell: float, seed: int) -> list[tuple[str, int, int, float, float]]:
    """(kind, N, sets, sets/s, CPU seconds per set) of each kind (``generate_kind``: a refused draw is drawn
    again, as QuantumGrav.jl does, and its time counts): sets are made until ``seconds_per_cell`` have passed
    (at least two)."""
    from QuantumGrav.data.kinds.catalogue import GENERATORS, generate_kind

    rows = []
    for kind in GENERATORS:
        for n in sizes:
            rng = np.random.default_rng(seed)
            generate_kind(kind, rng, n=n)  # warm-up: numpy's first calls
            count, start, cpu_start = 0, time.perf_counter(), time.process_time()
            while count < 2 or time.perf_counter() - start < seconds_per_cell:
                generate_kind(kind, rng, n=n)
                count += 1
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            rows.append((kind, n, count, count / wall, cpu / count))
    return rows


EXACT_CHANGES = (1, 16, 256)
EXACT_BLOCKS = (4, 64)


def dimension_rows(sizes: list[int], seconds_per_cell: float,
                   seed: int) -> list[tuple[str, int, int, str, int, float, float]]:
    """(kind, d, N, defect, sets, sets/s, CPU seconds per set) of each kind built on a sprinkling, in each
    dimension, with its drawn defect ("drawn") and with exact sizes ("k=..": changed relations, "m=..": block
    elements); sets are made until ``seconds_per_cell`` have passed (at least two)."""
    from QuantumGrav.data.kinds.catalogue import DEFECT_SIZE_ARGUMENTS, DIMENSIONAL_KINDS, GENERATORS, generate_kind

    rows = []
    for kind in (kind for kind in GENERATORS if kind in DIMENSIONAL_KINDS):
        exact = {"changes": EXACT_CHANGES, "block_elements": EXACT_BLOCKS}.get(DEFECT_SIZE_ARGUMENTS.get(kind), ())
        for dimension in (2, 3, 4):
            for n in sizes:
                for defect in (None, *exact):
                    rng = np.random.default_rng(seed)
                    make = functools.partial(generate_kind, kind, rng, n=n, dimension=dimension, defect_size=defect)
                    make()  # warm-up: numpy's first calls
                    count, start, cpu_start = 0, time.perf_counter(), time.process_time()
                    while count < 2 or time.perf_counter() - start < seconds_per_cell:
                        make()
                        count += 1
                    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
                    label = "drawn" if defect is None else f"{'k' if kind.startswith('destroyed') else 'm'}={defect}"
                    rows.append((kind, dimension, n, label, count, count / wall, cpu / count))
    return rows


def least_block_share(draws: int, seed: int) -> float:
    """The share of ``merged_ambiguous`` sets whose block has the least size (4 elements: max(4, rint(f n)), as
    QuantumGrav.jl rounds it), over ``draws`` draws of QuantumGrav.jl's default N and the kind's block fraction."""
    from QuantumGrav.data.kinds.common import draw_n
    from QuantumGrav.data.kinds.merged import MERGED_AMBIGUOUS, MIN_BLOCK_SIZE, block_size

    rng = np.random.default_rng(seed)
    sizes = [block_size(draw_n(rng), float(rng.uniform(*MERGED_AMBIGUOUS.block_fraction_range)))
             for _ in range(draws)]
    return float(np.mean(np.array(sizes) == MIN_BLOCK_SIZE))


def dimensions_table(rows: list[tuple[str, int, int, str, int, float, float]]) -> str:
    lines = ["| kind | d | N | defect | sets | sets/s | CPU s per set |", "|---|---:|---:|---|---:|---:|---:|"]
    lines += [f"| {kind} | {d} | {n:,} | {defect} | {num} | {rate:,.2f} | {cpu:.4f} |"
              for kind, d, n, defect, num, rate, cpu in rows]
    return "\n".join(lines)


def kinds_table(rows: list[tuple[str, int, int, float, float]]) -> str:
    lines = ["| kind | N | sets | sets/s | CPU s per set |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {kind} | {n:,} | {num} | {rate:,.2f} | {cpu:.4f} |" for kind, n, num, rate, cpu in rows]
    return "\n".join(lines)


def large_table(rows: list[tuple[int, int, float, float, float]]) -> str:
    lines = ["| N | sets | sets/s | CPU s per set | peak RSS MB |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {n:,} | {num} | {rate:,.2f} | {cpu:.3f} | {rss:,.0f} |" for n, num, rate, cpu, rss in rows]
    return "\n".join(lines)


def workers_table(rows: list[tuple[int, int, float]]) -> str:
    lines = ["| N | workers | sets/s | speed-up over 1 worker |", "|---:|---:|---:|---:|"]
    single = {n: rate for n, workers, rate in rows if workers == 1}
    lines += [f"| {n} | {workers} | {rate:,.0f} | {rate / single[n]:.2f} |" if rate >= 100 else
              f"| {n} | {workers} | {rate:.2f} | {rate / single[n]:.2f} |" for n, workers, rate in rows]
    return "\n".join(lines)


def markdown_table(rows: list[tuple[str, int, float]]) -> str:
    lines = ["| stage | sets | seconds | sets/s | ms per set |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {stage} | {sets} | {seconds:.2f} | {sets / seconds:,.0f} | {1000 * seconds / sets:.2f} |"
              for stage, sets, seconds in rows]
    return "\n".join(lines)


COLUMNS = {"stages": ["stage", "sets", "seconds"], "kinds": ["kind", "n", "sets", "sets_per_s", "cpu_s_per_set"],
           "dimensions": ["kind", "dimension", "n", "defect", "sets", "sets_per_s", "cpu_s_per_set"],
           "large": ["n", "sets", "sets_per_s", "cpu_s_per_set", "peak_rss_mb"],
           "workers": ["n", "workers", "sets_per_s"], "kinds_workers": ["n", "dimension", "workers", "sets_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num", type=int, default=10000, help="number of causal sets (default 10000)")
    parser.add_argument("--n", type=int, default=128, help="elements per set (default 128)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scaling-num", type=int, default=2048, help="sets per cache in the workers table (0: skip)")
    parser.add_argument("--scaling-n", type=int, nargs="+", default=[64, 128, 256], help="N of the workers table")
    parser.add_argument("--large-n", type=int, nargs="*", default=[1024, 2048],
                        help="N of the large-set table (generate_causal_sets end to end; nothing: skip)")
    parser.add_argument("--large-num", type=int, default=12, help="sets per N of the large-set table (default 12)")
    parser.add_argument("--kinds-n", type=int, nargs="*", default=[],
                        help="N of the table of QuantumGrav.jl's nine kinds (nothing: skip)")
    parser.add_argument("--kinds-seconds", type=float, default=3.0, help="seconds of generation per kind and N")
    parser.add_argument("--dimensions-n", type=int, nargs="*", default=[],
                        help="N of the table of the kinds sprinkled in d = 2, 3, 4 (nothing: skip)")
    parser.add_argument("--dimensions-seconds", type=float, default=1.0,
                        help="seconds of generation per kind, d, N and defect")
    parser.add_argument("--kinds-workers-n", type=int, nargs="*", default=[],
                        help="N of the table of the kinds' stores written by 1, 2, ... workers (nothing: skip)")
    parser.add_argument("--kinds-workers-num", type=int, default=128, help="sets of each kind there (default 128)")
    parser.add_argument("--kinds-workers-dimension", type=int, default=4, help="their dimension (default 4)")
    parser.add_argument("--json", help="also store the tables in this file")
    args = parser.parse_args()
    stored = {"command": " ".join(["python", *sys.argv]), "load_average_before": os.getloadavg(),
              "usable_cores": usable_cpu_count()}
    if (args.num and args.num < len(cs.DEFAULT_CLASSES)) or args.n < 2:
        parser.error(f"--num must be 0 (skip) or >= {len(cs.DEFAULT_CLASSES)} and --n >= 2")
    if args.num:
        print(f"N = {args.n}, classes {', '.join(cs.DEFAULT_CLASSES)}\n")
        stored["stages"] = run(args.num, args.n, args.seed)
        print(markdown_table(stored["stages"]))
    if args.large_n:
        print(f"\n{args.large_num} sets per N, classes {', '.join(cs.DEFAULT_CLASSES)}, one process\n")
        stored["large"] = large_rows(args.large_num, args.large_n, args.seed)
        print(large_table(stored["large"]))
    if args.scaling_num:
        print(f"\n{args.scaling_num} sets per cache, classes {', '.join(cs.DEFAULT_CLASSES)}, "
              f"{usable_cpu_count()} usable cores\n")
        if usable_cpu_count() > 1:
            stored["fork_server_s"] = start_fork_server()
            print(f"the pool's fork server started in {stored['fork_server_s']:.1f} s (once per process, in no row)\n")
        stored["workers"] = workers_rows(args.scaling_num, args.scaling_n, args.seed)
        print(workers_table(stored["workers"]))
    if args.kinds_n:
        print(f"\nQuantumGrav.jl's nine kinds, one process, {torch_threads()} thread(s)\n")
        stored["kinds"] = kinds_rows(args.kinds_n, args.kinds_seconds, args.seed)
        print(kinds_table(stored["kinds"]))
    if args.dimensions_n:
        print(f"\nThe kinds sprinkled in d dimensions, one process, {torch_threads()} thread(s)\n")
        stored["dimensions"] = dimension_rows(args.dimensions_n, args.dimensions_seconds, args.seed)
        print(dimensions_table(stored["dimensions"]))
        stored["merged_ambiguous_least_block_share"] = least_block_share(100_000, args.seed)
        print(f"\nmerged_ambiguous at N 64-128: {stored['merged_ambiguous_least_block_share']:.1%} of the blocks have "
              "4 elements")
    if args.kinds_workers_n:
        print(f"\n{args.kinds_workers_num} sets of each of {', '.join(KINDS_WORKERS_KINDS)} in d = "
              f"{args.kinds_workers_dimension} (exact defects {KINDS_WORKERS_SIZES}) written as stores, "
              f"{usable_cpu_count()} usable cores\n")
        stored["kinds_workers_num"] = args.kinds_workers_num
        stored["kinds_workers"] = kinds_workers_rows(args.kinds_workers_num, args.kinds_workers_n,
                                                     args.kinds_workers_dimension, args.seed)
        print(workers_table([(n, workers, rate) for n, _, workers, rate in stored["kinds_workers"]]))
    if args.json:
        stored.update(load_average_after=os.getloadavg(), date=datetime.datetime.now(datetime.timezone.utc).isoformat())
        for table, columns in COLUMNS.items():  # rows as records, named
            if table in stored:
                stored[table] = [dict(zip(columns, row)) for row in stored[table]]
        atomic_write_text(args.json, json.dumps(stored, indent=1))  # whole or not at all


if __name__ == "__main__":
    main()
