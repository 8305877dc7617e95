#!/usr/bin/env python3
"""Where a training step of the default model stands against this machine: its FLOPs, the rate it achieves, and
the rate this machine multiplies dense float32 matrices at the step's own shapes, with the threads in use.

    python benchmarks/step_vs_peak/bench_step_vs_peak.py                      # this tree, N 64-128, ~512, ~1,024
    mkdir /tmp/qg_before && git archive 44088b4 QuantumGravPy/src | tar -x -C /tmp/qg_before
    python benchmarks/step_vs_peak/bench_step_vs_peak.py --before-src /tmp/qg_before/QuantumGravPy/src

Each row is one fresh process (``OMP_NUM_THREADS`` and ``torch.set_num_threads`` at ``--threads``; denormals
flushed, as the library does) that builds the default job's model (``configs/train.yaml``, seed 0) for a batch
of ``--batch`` causal sets of the default generator's mix at the row's N, and:

- counts one step's FLOPs (forward and backward; the optimizer's few are left out) with
  ``QuantumGrav.models.product_counter.ProductCounter`` (this tree's, loaded from its file, for either tree):
  ``torch.utils.flop_counter`` with the sparse products (SpMM, SDDMM) counted by their nonzeros, 2 FLOPs per
  multiply-add; and records the shape of every dense matrix product of the step (mm, addmm, bmm, baddbmm);
- times ``--steps`` whole AdamW steps after a warm-up (median wall time; the CPU time beside it), and as many
  forward passes without gradients in eval mode (what validation and the batch norm pass cost per batch);
- times each of those dense shapes alone (float32, the same threads, median of repeats after a warm-up): the
  "rate at the step's shapes" is their FLOPs over their summed times, what this machine gives these products,
  and a 4096 x 4096 product gives its rate on a large square one.

The step's achieved rate is all its FLOPs over its time; its share of the peak is that rate over the rate at
its shapes, both per CPU second of the process (``*_cpu``: on a shared machine CPU time moves far less with the
others' load than wall time does; with one thread it is the time the step had a core) and per wall second (an upper bound on what dense products alone would give: the sparse products, softmax, batch norm,
dropout and the optimizer run far below it). ``--before-src`` alternates this tree with another tree's
QuantumGrav (its source first on PYTHONPATH), round by round, on the same causal sets. Rows are stored whole in
``--json`` after every process, with the load average.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
THIS_SRC = REPO / "QuantumGravPy" / "src"
RESULTS = Path(__file__).resolve().parent / "results_step_vs_peak.json"
SIZES = {"64-128": (64, 128), "~512": (480, 544), "~1,024": (992, 1056)}


def _product_counter():
    """This tree's ProductCounter class, loaded from its file (it imports only torch): the same count for a tree
    that has none."""
    path = THIS_SRC / "QuantumGrav" / "models" / "product_counter.py"
    spec = importlib.util.spec_from_file_location("product_counter_of_this_tree", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ProductCounter


def _dense_shapes_mode():
    """A dispatch mode that records (batch, m, k, n) of every dense matrix product it sees."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    operands = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2), aten.bmm.default: (0, 1),
                aten.baddbmm.default: (1, 2)}

    class DenseShapes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes: list[tuple[int, int, int, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in operands:
                left, right = (args[i] for i in operands[func])
                if left.layout == torch.strided and right.layout == torch.strided:
                    batch = left.size(0) if left.dim() == 3 else 1
                    self.shapes.append((batch, left.size(-2), left.size(-1), right.size(-1)))
            return func(*args, **(kwargs or {}))

    return DenseShapes()


def _matmul_seconds(batch: int, m: int, k: int, n: int, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one float32 product of these shapes, alone."""
    import torch

    left, right = torch.randn(batch, m, k), torch.randn(batch, k, n)
    product = torch.bmm if batch > 1 else (lambda a, b: torch.mm(a[0], b[0]))
    product(left, right)
    times = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        product(left, right)
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return statistics.median(t for t, _ in times), statistics.median(c for _, c in times)


def worker(spec: dict) -> dict:
    import torch
    from torch_geometric.data import Batch

    import QuantumGrav as QG
    from QuantumGrav import CausalSetDataset

    torch.set_num_threads(spec["threads"])
    torch.set_flush_denormal(True)  # as training.flush_denormals does on the CPU
    n_min, n_max = spec["n"]
    dataset = CausalSetDataset(spec["data"], num_samples=spec["batch"], n_min=n_min, n_max=n_max, seed=0, workers=1)
    batch = Batch.from_data_list([dataset[i] for i in range(spec["batch"])])
    torch.manual_seed(0)
    model = QG.build_model(QG.load_config(REPO / "configs" / "train.yaml")["model"], batch.x.size(1),
                           dataset.num_classes).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def forward_backward():
        torch.nn.functional.cross_entropy(model(batch), batch.y.view(-1)).backward()

    def step() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        optimizer.zero_grad(set_to_none=True)
        forward_backward()
        optimizer.step()
        return time.perf_counter() - wall, time.process_time() - cpu

    step()  # warm-up: allocations, MKL's first calls
    counter, shapes = _product_counter()(), _dense_shapes_mode()
    with counter, shapes:
        forward_backward()
    optimizer.zero_grad(set_to_none=True)
    timed = [step() for _ in range(spec["steps"])]
    step_s = statistics.median(wall for wall, _ in timed)
    forward = []  # evaluation's and the batch norm pass's work: a forward pass without gradients
    with torch.no_grad():
        model.eval()
        for _ in range(spec["steps"]):
            wall, cpu = time.perf_counter(), time.process_time()
            model(batch)
            forward.append((time.perf_counter() - wall, time.process_time() - cpu))
        model.train()
    distinct: dict[tuple, int] = {}
    for shape in shapes.shapes:
        distinct[shape] = distinct.get(shape, 0) + 1
    gemm_s = gemm_cpu_s = gemm_flops = 0.0
    for (b, m, k, n), count in distinct.items():
        wall, cpu = _matmul_seconds(b, m, k, n, spec["repeats"])
        gemm_s, gemm_cpu_s = gemm_s + count * wall, gemm_cpu_s + count * cpu
        gemm_flops += count * 2 * b * m * k * n
    square_s, square_cpu_s = _matmul_seconds(1, 4096, 4096, 4096, 3)
    flops = counter.get_total_flops()
    step_cpu_s = statistics.median(cpu for _, cpu in timed)
    return {"source": QG.__file__, "nodes": batch.num_nodes, "links": batch.edge_index.size(1), "step_s": step_s,
            "step_cpu_s": step_cpu_s,
            "forward_s": statistics.median(wall for wall, _ in forward),
            "forward_cpu_s": statistics.median(cpu for _, cpu in forward), "flops": flops, "dense_flops": counter.dense,
            "sparse_flops": counter.sparse, "dense_products": len(shapes.shapes),
            "gemm_alone_s": gemm_s, "rate_at_shapes": gemm_flops / gemm_s, "rate_4096": 2 * 4096 ** 3 / square_s,
            "achieved_rate": flops / step_s, "share_of_peak": flops / step_s / (gemm_flops / gemm_s),
            "dense_at_peak_share_of_step": gemm_s / step_s,
            # the same per CPU second (all threads): what moves far less with the others' load on a shared machine
            "gemm_alone_cpu_s": gemm_cpu_s, "rate_at_shapes_cpu": gemm_flops / gemm_cpu_s,
            "rate_4096_cpu": 2 * 4096 ** 3 / square_cpu_s, "achieved_rate_cpu": flops / step_cpu_s,
            "share_of_peak_cpu": flops / step_cpu_s / (gemm_flops / gemm_cpu_s)}


def run(src: Path, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": str(spec["threads"])}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the worker for {spec} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_row(row: dict) -> None:
    r = row["result"]
    print(f"| {row['tree']} | {row['size']} | {row['threads']} | {r['nodes']:,} | {r['links']:,} | "
          f"{r['flops'] / 1e9:.2f} ({r['dense_flops'] / r['flops']:.0%} dense) | {1e3 * r['step_s']:.0f} | "
          f"{1e3 * r['step_cpu_s']:.0f} | {r['achieved_rate_cpu'] / 1e9:.1f} | {r['rate_at_shapes_cpu'] / 1e9:.1f} | "
          f"{r['rate_4096_cpu'] / 1e9:.1f} | {r['share_of_peak_cpu']:.0%} | {r['share_of_peak']:.0%} | "
          f"{row['load_average'][0]:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed AdamW steps per process (median)")
    parser.add_argument("--repeats", type=int, default=5, help="timings of each dense shape alone (median)")
    parser.add_argument("--rounds", type=int, default=1, help="processes per tree and row, alternated")
    parser.add_argument("--before-src", type=Path, help="another QuantumGrav source tree, alternated with this one")
    parser.add_argument("--data", type=Path, default=Path("/tmp/bench_step_vs_peak_data"),
                        help="the causal sets' cache (generated once, shared by both trees)")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--append", action="store_true", help="add the rows to those stored in --json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    trees = {"this tree": THIS_SRC}
    if args.before_src is not None:
        if not (args.before_src / "QuantumGrav" / "__init__.py").is_file():
            parser.error(f"--before-src must hold QuantumGrav/ (got {args.before_src}); make one with `git archive "
                         f"<rev> QuantumGravPy/src | tar -x -C /tmp/qg_before`")
        trees = {"before": args.before_src, **trees}
    sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "benchmarks" / "training_loop")]  # study_results, bench_training
    import study_results  # benchmarks/study_results.py: written whole or not at all
    from bench_training import cpu_model

    stored = json.loads(args.json.read_text()) if args.append and args.json.exists() else {}
    results = {"commands": [*stored.get("commands", []), " ".join(sys.argv)],
               "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "platform": platform.platform()},
               "trees": {name: str(src) for name, src in trees.items()}, "rows": stored.get("rows", [])}
    print("| tree | N | threads | elements | links | GFLOP per step | step ms | step CPU ms | achieved GFLOP per CPU s | "
          "dense rate at the step's shapes, per CPU s | 4096² rate, per CPU s | share of peak (CPU) | share of peak "
          "(wall) | load |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        for threads in args.threads:
            for _ in range(args.rounds):
                for tree, src in trees.items():
                    spec = {"n": SIZES[size], "batch": args.batch, "threads": threads, "steps": args.steps,
                            "repeats": args.repeats, "data": str(args.data / size)}
                    result = run(src, spec)
                    row = {"tree": tree, "size": size, "threads": threads, "batch": args.batch, "result": result,
                           "load_average": os.getloadavg(),
                           "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
                    results["rows"].append(row)
                    print_row(row)
                    study_results.write_json(args.json, results, indent=1)
    print(f"\nstored in {args.json}")


if __name__ == "__main__":
    main()
