"""One training step of the default model (configs/train.yaml: SparseTransformerConv, 3 x 128, 2 heads, both
directions) at large N, with this tree's QuantumGrav against another source tree's (``--before-src``, e.g. a
``git archive`` of an earlier commit), in alternated fresh processes on the same causal sets; prints a table
and stores it in benchmarks/results_bench_sparse_attention.json.

    mkdir /tmp/qg_before && git archive <rev> QuantumGravPy/src | tar -x -C /tmp/qg_before
    nice python benchmarks/bench_sparse_attention.py --before-src /tmp/qg_before/QuantumGravPy/src

Each process (one torch thread unless ``--threads``) builds the model with seed 0, takes one warm-up step and
times ``--steps`` AdamW steps (median); ``--rounds`` alternations of before/after give the spread of a loaded
machine; the rows report each round's graphs/s and the after/before ratio of the round medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results_bench_sparse_attention.json"
THIS_SRC = REPO / "QuantumGravPy" / "src"


def worker(spec: dict) -> dict:
    import torch
    from torch_geometric.data import Batch

    import QuantumGrav as QG
    from QuantumGrav.data import CausalSetDataset

    torch.set_num_threads(spec["threads"])
    dataset = CausalSetDataset(spec["data"], num_samples=spec["batch"], n_min=spec["n"], n_max=spec["n"], seed=0,
                               workers=1)
    batch = Batch.from_data_list([dataset[i] for i in range(spec["batch"])])
    torch.manual_seed(0)
    model = QG.build_model(QG.load_config(REPO / "configs" / "train.yaml")["model"], batch.x.size(1),
                           dataset.num_classes).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> float:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(batch), batch.y.view(-1)).backward()
        optimizer.step()
        return time.perf_counter() - start

    step()
    step_s = statistics.median(step() for _ in range(spec["steps"]))
    return {"source": QG.__file__, "links_per_set": batch.edge_index.size(1) / spec["batch"], "step_s": step_s,
            "graphs_per_s": spec["batch"] / step_s}


def run(src: Path, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(spec["threads"])}
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-src", type=Path, help="the QuantumGrav source tree to compare against")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.before_src is None or not (args.before_src / "QuantumGrav" / "__init__.py").is_file():
        parser.error(f"--before-src must be a source tree holding QuantumGrav/ (got {args.before_src}); make one "
                     "with `git archive <rev> QuantumGravPy/src | tar -x -C /tmp/qg_before` and pass /tmp/qg_before/QuantumGravPy/src")
    rows = []
    print("| N | batch | links/set | before graphs/s | after graphs/s | after / before |\n|---:|---:|---:|---|---|---:|")
    with tempfile.TemporaryDirectory(prefix="bench_sparse_attention_") as folder:
        for n in args.sizes:
            spec = {"n": n, "batch": args.batch, "steps": args.steps, "threads": args.threads,
                    "data": str(Path(folder) / f"n{n}")}
            runs = {"before": [], "after": []}
            for _ in range(args.rounds):
                runs["before"].append(run(args.before_src, spec))
                runs["after"].append(run(THIS_SRC, spec))
            rates = {k: [r["graphs_per_s"] for r in v] for k, v in runs.items()}
            ratio = statistics.median(rates["after"]) / statistics.median(rates["before"])
            row = {**spec, "links_per_set": runs["after"][0]["links_per_set"], "rounds": rates, "ratio": ratio,
                   "load_average": os.getloadavg()}
            rows.append(row)
            print(f"| {n:,} | {args.batch} | {row['links_per_set']:,.0f} | "
                  f"{', '.join(f'{r:.2f}' for r in rates['before'])} | "
                  f"{', '.join(f'{r:.2f}' for r in rates['after'])} | {ratio:.2f} |", flush=True)
    RESULTS.write_text(json.dumps({"rows": rows, "before_src": str(args.before_src)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
