"""Peak memory of reading one set of a QuantumGrav.jl store, per pair of elements: what ``stores.limits.BYTES_PER_PAIR``
(the memory check that refuses a set too large before anything is read) rests on; prints a table, stores JSON.

    python benchmarks/stores/bench_store_read_memory.py [--sizes 2048 4096] [--json benchmarks/stores/results_store_read_memory.json]

For each N a 2d sprinkling (as dense as a causal set gets: most of its pairs related) is written with
``write_julia_store`` into a temporary folder by one process; a fresh process then opens the store, reads the group's
small arrays, and measures the growth of its peak resident memory (``ru_maxrss``) over reading ``adj`` and deriving
the features, edges and invariants (``causal_matrix`` and ``graph_tensors``, what ``QuantumGravJLDataset`` does per
set), divided by N^2.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

WRITE = """
import sys, numpy as np
from QuantumGrav.data import causal_sets as cs
from QuantumGrav.data.zarr_store import write_julia_store
n, path = int(sys.argv[1]), sys.argv[2]
write_julia_store(path, [cs.sprinkle_diamond(n, 2, np.random.default_rng(0))[1]], [1], [True])
"""
READ = """
import resource, sys, numpy as np, zarr
from pathlib import Path
from QuantumGrav.data.stores.graphs import causal_matrix, graph_tensors
n, path = int(sys.argv[1]), Path(sys.argv[2])
root = zarr.open_group(str(path), mode="r", zarr_format=2)
np.asarray(root["cset_1/manifold_like"][...])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
graph_tensors(causal_matrix(np.asarray(root["cset_1/adj"][...]), path, "cset_1"), "links", path, "cset_1")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024 / n**2)
"""


def bytes_per_pair(n: int, folder: Path) -> float:
    store = folder / f"n{n}.zarr"
    subprocess.run([sys.executable, "-c", WRITE, str(n), str(store)], check=True)
    done = subprocess.run([sys.executable, "-c", READ, str(n), str(store)], check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [{"n": n, "bytes_per_pair": round(bytes_per_pair(n, Path(tmp)), 2)} for n in args.sizes]
    from QuantumGrav.data.stores.limits import BYTES_PER_PAIR

    print(f"{'N':>8}{'bytes per pair (peak RSS growth / N^2)':>42}")
    for row in rows:
        print(f"{row['n']:>8,}{row['bytes_per_pair']:>42.2f}")
    print(f"stores.limits.BYTES_PER_PAIR = {BYTES_PER_PAIR}")
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: study_results.py
        import study_results  # written whole or not at all

        study_results.write_json(args.json, {"rows": rows, "bytes_per_pair_assumed": BYTES_PER_PAIR,
                                             "machine": platform.platform(), "python": platform.python_version()},
                                 indent=1)


if __name__ == "__main__":
    main()
