#!/usr/bin/env python3
"""The cost per set of each model made for orders, and of the default GNN beside them: the seconds of one forward and
backward pass and the peak memory it adds, at N = 128, 512 and 1,024, on polynomial sprinklings of exactly N elements
(QuantumGrav.jl's manifold-like kind), one torch thread.

    python benchmarks/order_models/bench_cost.py --json benchmarks/order_models/results_cost.json
    python benchmarks/order_models/bench_cost.py --results benchmarks/order_models/results_cost.json

Each (model, N) is measured in two processes of its own: one prepares a batch of ``--sets`` sets (4 at N = 128, 1
above: a batch of the pair network's dense states at N = 1,024 is gigabytes) as the model's config does
(``OrderStructure``: closure, intervals, encoding; timed per set) and saves it; the other loads it, builds the model as
its config in configs/ does (the trainer's ``build_model``), runs one warm-up step, then ``--repeats`` timed steps
(forward, the sum of the outputs as a loss, backward): the median over them divided by the sets is the time per set.
Peak memory is the growth of that process's resident high-water mark (``ru_maxrss``) over the steps, warm-up
included, against its value with the batch loaded and the model built: what the forward and backward passes add,
per batch (divide by the sets for one set). A (model, N) that runs past
``--timeout`` seconds or out of memory is recorded as such: that is where it stops being affordable here. Each
result carries the load average when it was taken (the machine is shared: timings are only comparable within
one file). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "QuantumGravPy" / "src"))

import study_results  # noqa: E402

MODELS = {  # row -> (config, overrides of its model section)
    "default_gnn": ("configs/manifold_like.yaml", []),
    "typed_relations": ("configs/order_typed_relations.yaml", []),
    "typed_relations_realizer": ("configs/order_typed_relations.yaml", ["model.kwargs.realizer_dimension=2"]),
    "pair_network": ("configs/order_pair_network.yaml", []),
    "gps": ("configs/order_gps.yaml", []),
}
SIZES = (128, 512, 1024)


def sets_of(n: int, count: int, order_structure: dict, data: Path):
    """``count`` polynomial sprinklings of exactly ``n`` elements, with the transform the order models read."""
    from QuantumGrav.data.kinds.dataset import KindsDataset
    from QuantumGrav.data.transforms import with_order_structure

    return with_order_structure(dataset=KindsDataset, path=data, kinds=["polynomial"], num_per_kind=count, n_min=n,
                                n_max=n, seed=7, order_structure=order_structure)


def prepare(row: str, n: int, sets: int, data: Path, out: Path) -> dict:
    """In this process: ``sets`` sets as the model's config prepares them, batched and saved to ``out`` (so that
    the measuring process's memory holds the batch, not what preparing it took); the seconds per set."""
    import torch
    from torch_geometric.data import Batch

    import QuantumGrav as QG

    torch.set_num_threads(1)
    config = QG.load_config(REPO / MODELS[row][0], MODELS[row][1])
    dataset = sets_of(n, sets, config["data"]["kwargs"].get("order_structure", {"random_walk_steps": 8}), data)
    started = time.perf_counter()
    items = [dataset[i] for i in range(sets)]
    seconds = (time.perf_counter() - started) / sets
    torch.save({"batch": Batch.from_data_list(items), "in_channels": dataset.num_node_features}, out)
    return {"prepare_seconds_per_set": seconds}


def measure_one(row: str, n: int, sets: int, repeats: int, saved: Path) -> dict:
    """In this process: time per set of ``repeats`` forward+backward steps on the saved batch, and the peak memory
    the steps add to the process (the batch and the model already in memory)."""
    import torch

    import QuantumGrav as QG
    from QuantumGrav.training.model_builder import build_model

    torch.set_num_threads(1)
    loaded = torch.load(saved, weights_only=False)
    batch = loaded["batch"]
    torch.manual_seed(0)
    model = build_model(QG.load_config(REPO / MODELS[row][0], MODELS[row][1])["model"], loaded["in_channels"], 1)
    model.train()

    def step() -> float:
        begun = time.perf_counter()
        model(batch).sum().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - begun

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()  # warm-up: first-call allocations and lazy set-up (counted in the peak, not in the time)
    seconds = [step() for _ in range(repeats)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"row": row, "n": n, "sets": sets, "seconds_per_set": statistics.median(seconds) / sets,
            "seconds_per_step": seconds, "peak_memory_added_mib_per_batch": peak / 1024,
            "parameters": sum(p.numel() for p in model.parameters()), "loadavg": os.getloadavg()}


def run(row: str, n: int, args: argparse.Namespace) -> dict:
    """One (model, N): its batch prepared in one process, measured in another (``prepare``, ``measure_one``)."""
    sets = args.sets if n <= 128 else 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="qg_order_cost_") as scratch:
        common = [row, str(n), "--sets", str(sets), "--repeats", str(args.repeats), "--data", args.data,
                  "--saved", str(Path(scratch) / "batch.pt")]
        outputs = []
        for mode in ("--prepare", "--one"):
            try:
                done = subprocess.run([sys.executable, __file__, mode, *common], capture_output=True, text=True,
                                      timeout=args.timeout, env=env)
            except subprocess.TimeoutExpired:
                return {"row": row, "n": n, "sets": sets, "outcome": f"over {args.timeout:.0f} s",
                        "loadavg": os.getloadavg()}
            if done.returncode != 0:
                tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
                return {"row": row, "n": n, "sets": sets, "outcome": f"failed: {tail[0][:300]}",
                        "loadavg": os.getloadavg()}
            outputs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {**outputs[1], **outputs[0], "outcome": "measured"}


def print_table(results: dict) -> None:
    print(f"{results.get('setup', '')}\n\n| model | N | s per set (fwd+bwd) | peak MiB added per batch | sets per batch "
          "| preparing a set, s | load average |\n|---|---|---|---|---|---|---|")
    for r in results["runs"]:
        if r.get("outcome") != "measured":
            print(f"| {r['row']} | {r['n']} | {r['outcome']} | | {r['sets']} | | {r['loadavg'][0]:.1f} |")
            continue
        print(f"| {r['row']} | {r['n']} | {r['seconds_per_set']:.3f} | {r['peak_memory_added_mib_per_batch']:.0f} | "
              f"{r['sets']} | {r['prepare_seconds_per_set']:.3f} | {r['loadavg'][0]:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--sets", type=int, default=4, help="sets per batch at N <= 128 (1 above)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per (model, N) process")
    parser.add_argument("--data", default=str(REPO / "data" / "order_cost"), help="where the sets are written")
    parser.add_argument("--prepare", nargs=2, metavar=("ROW", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--one", nargs=2, metavar=("ROW", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--saved", help=argparse.SUPPRESS)
    study_results.add_arguments(parser, "measurement")
    args = parser.parse_args()
    if args.prepare:
        print(json.dumps(prepare(args.prepare[0], int(args.prepare[1]), args.sets, Path(args.data), Path(args.saved))))
        return 0
    if args.one:
        print(json.dumps(measure_one(args.one[0], int(args.one[1]), args.sets, args.repeats, Path(args.saved))))
        return 0
    if args.results:
        print_table(study_results.load(args.results)[1])
        return 0
    path, results = study_results.load(args.json)
    results["setup"] = (f"polynomial sprinklings of exactly N elements, {args.sets} sets per batch at N <= 128 and 1 "
                        f"above, median of {args.repeats} forward+backward steps after one warm-up, 1 torch thread, "
                        f"CPU; a process per (model, N), stopped after {args.timeout:.0f} s")
    done = {(r["row"], r["n"]) for r in results["runs"]}
    for n in args.sizes:
        for row in args.rows:
            if (row, n) in done:
                continue
            results["runs"].append(run(row, n, args))
            study_results.save(path, results)
            print(json.dumps(results["runs"][-1]), flush=True)
    print_table(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
