"""Sets/s and disk of QuantumGrav.jl-layout Zarr stores with the feature cache; prints tables, stores JSON.

    python benchmarks/stores/bench_zarr_store.py [--sizes 1024 2048] [--num 12] [--workers 1 2] [--seed 0]
                                          [--json benchmarks/stores/results_zarr_store.json] [--target-sets 55000]

For each N, ``--num`` causal sets (4d and 2d sprinklings and layered orders in turn, as QuantumGrav.jl's stores mix
manifold-like and other sets) are written with ``zarr_store.write_julia_store`` in QuantumGrav.jl's layout into a
temporary folder. Then, in one process: every item read with the features computed on the fly (``cache=False``),
the first pass with the cache (computes and writes ``<store>.qg_features``, a shard per set: ``data.shards``) and a
second pass (reads it). Then the
cache is built again from scratch with ``build_cache(workers=K)`` for each ``--workers`` K (a pool forked from a
fork server; its start is timed on its own first and is in no row). The disk table gives the store's and the
cache's bytes per set and what ``--target-sets`` sets of that N cost on one node: the cache's disk, and the
hours to build it with the measured sets/s of the most workers (an extrapolation, linear in the number of sets:
the sets are independent). Peak RSS is this process's, over the whole run. Needs the zarr extra.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.zarr_store import QuantumGravJLDataset, write_julia_store

POLYNOMIAL, LAYERED = 1, 6  # cset_type_encoder codes in QuantumGrav.jl/examples/produce_data.jl


def mixed_sets(num: int, n: int, seed: int) -> tuple[list[np.ndarray], list[int]]:
    """4d sprinkling, 2d sprinkling, layered order, in turn."""
    rng = np.random.default_rng(seed)
    kinds = [k % 3 for k in range(num)]
    matrices = [cs.sprinkle_diamond(n, 4 if kind == 0 else 2, rng)[1] if kind < 2
                else cs.random_layered_orders(1, n, rng)[0] for kind in kinds]
    return matrices, [POLYNOMIAL if kind < 2 else LAYERED for kind in kinds]


def sets_per_second(read) -> tuple[float, float]:
    """Sets/s of ``read`` (wall clock) and this process's CPU seconds per set: on a shared machine the CPU time
    is the cost that does not depend on what else runs (the pools' workers are not counted in it)."""
    start, cpu_start = time.perf_counter(), time.process_time()
    count = read()
    return count / (time.perf_counter() - start), (time.process_time() - cpu_start) / count


def read_all(dataset: QuantumGravJLDataset) -> int:
    for index in range(len(dataset)):
        dataset[index]
    return len(dataset)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def measure(n: int, num: int, workers: list[int], seed: int, folder: Path) -> dict:
    matrices, codes = mixed_sets(num, n, seed)
    store = write_julia_store(folder / f"mixed_n{n}.zarr", matrices, codes, [c == POLYNOMIAL for c in codes])
    cache = folder / f"{store.name}.qg_features"
    timings = {"on the fly (cache=False)": sets_per_second(lambda: read_all(QuantumGravJLDataset(store, cache=False))),
               "cache, first pass (computes, writes)": sets_per_second(lambda: read_all(QuantumGravJLDataset(store))),
               "cache, second pass (reads)": sets_per_second(lambda: read_all(QuantumGravJLDataset(store)))}
    cache_bytes = folder_bytes(cache)
    for k in workers:
        shutil.rmtree(cache)
        timings[f"build_cache, {k} worker(s)"] = sets_per_second(
            lambda: QuantumGravJLDataset(store).build_cache(workers=k))
    links = sum(int(QuantumGravJLDataset(store)[i].edge_index.shape[1]) for i in range(num)) / num
    return {"n": n, "num": num, "links_per_set": links,
            "sets_per_s": {mode: rate for mode, (rate, _) in timings.items()},
            "cpu_s_per_set": {mode: cpu for mode, (_, cpu) in timings.items() if not mode.endswith("worker(s)") or
                              mode.startswith("build_cache, 1 ")},
            "store_bytes_per_set": folder_bytes(store) / num, "cache_bytes_per_set": cache_bytes / num}


def start_fork_server(folder: Path) -> float:
    """Seconds to start the pool's fork server (once per process): a one-set store built with two workers."""
    store = write_julia_store(folder / "warm.zarr", [np.zeros((2, 2), bool)] * 2, [LAYERED] * 2, [False] * 2)
    start = time.perf_counter()
    QuantumGravJLDataset(store).build_cache(workers=2)
    return time.perf_counter() - start


def tables(results: list[dict], target: int) -> str:
    lines = ["| N | links per set | read (one process unless said) | sets/s | CPU s per set |",
             "|---:|---:|---|---:|---:|"]
    lines += [f"| {r['n']:,} | {r['links_per_set']:,.0f} | {mode} | {rate:,.2f} | "
              f"{_cpu_text(r['cpu_s_per_set'].get(mode))} |" for r in results for mode, rate in r["sets_per_s"].items()]
    lines += ["", f"| N | store MB per set | cache MB per set | {target:,} sets: cache GB | {target:,} sets: hours "
              f"on one core (CPU time of the first pass) | on the workers measured (wall clock) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        cpu = r["cpu_s_per_set"]["cache, first pass (computes, writes)"]
        workers = max((m for m in r["sets_per_s"] if m.startswith("build_cache")), default=None,
                      key=lambda m: int(m.split(", ")[1].split()[0]))
        measured = f"{target / r['sets_per_s'][workers] / 3600:,.1f} ({workers})" if workers else "-"
        lines.append(f"| {r['n']:,} | {r['store_bytes_per_set'] / 1e6:.3f} | {r['cache_bytes_per_set'] / 1e6:.3f} | "
                     f"{target * r['cache_bytes_per_set'] / 1e9:,.1f} | {target * cpu / 3600:,.1f} | {measured} |")
    return "\n".join(lines)


def _cpu_text(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048], help="elements per set")
    parser.add_argument("--num", type=int, default=12, help="causal sets per store (default 12)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="build_cache pools to time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-sets", type=int, default=55_000, help="sets of the extrapolated store")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if args.num < 1 or min(args.sizes) < 2 or any(k < 1 for k in args.workers):
        parser.error("--num and --workers must be >= 1 and every size >= 2")
    load_at_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as folder:
        fork_server_s = start_fork_server(Path(folder)) if any(k > 1 for k in args.workers) else None
        results = [measure(n, args.num, args.workers, args.seed, Path(folder)) for n in args.sizes]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(tables(results, args.target_sets))
    if fork_server_s is not None:
        print(f"\nthe pool's fork server started in {fork_server_s:.1f} s (once per process, in no row)")
    print(f"peak RSS of this process {peak_mb:,.0f} MB; load average {load_at_start[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
        import study_results  # written whole or not at all

        study_results.write_json(args.json, {"command": "benchmarks/stores/bench_zarr_store.py", "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "machine": platform.node(),
            "load_average_at_start": load_at_start, "load_average_at_end": list(os.getloadavg()), "peak_rss_mb": peak_mb,
            "fork_server_s": fork_server_s, "results": results}, indent=2)


if __name__ == "__main__":
    main()
