"""One training step of the default model (configs/train.yaml: SparseTransformerConv, 3 x 128, 2 heads, both
directions) at large N, with this tree's QuantumGrav against another source tree's (``--before-src``, e.g. a
``git archive`` of an earlier commit), in alternated fresh processes on the same causal sets; prints a table
and stores it in benchmarks/scale/results_bench_sparse_attention.json.

    mkdir /tmp/qg_before && git archive <rev> QuantumGravPy/src | tar -x -C /tmp/qg_before
    nice python benchmarks/scale/bench_sparse_attention.py --before-src /tmp/qg_before/QuantumGravPy/src

Each process (one torch thread unless ``--threads``) builds the model with seed 0, takes one warm-up step and
times ``--steps`` AdamW steps (median) and the peak RSS's growth over the process before its first
step; ``--rounds`` alternations of before/after give the spread of a loaded
machine; the rows report each round's graphs/s and the after/before ratio of the round medians.

``--tables kernels``: the layer's sparse products alone (``_sddmm``, ``_spmm``, ``_spmm`` transposed at 2 heads
x 128 channels) of both trees in one process, alternated ``--repeats`` times on random graphs with the
generator's links per set at N = 1,024 (28,800): each tree's ``sparse_attention`` module is loaded from its
file (it imports only torch and PyG), the inputs are shared; medians, per batch.
"""

from __future__ import annotations

import argparse
import importlib.util
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
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
RESULTS = REPO / "benchmarks" / "scale" / "results_bench_sparse_attention.json"
THIS_SRC = REPO / "QuantumGravPy" / "src"


def worker(spec: dict) -> dict:
    import torch
    from torch_geometric.data import Batch

    import QuantumGrav as QG
    from QuantumGrav import CausalSetDataset  # the public name: the before tree may have another layout

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

    rss_before = _peak_rss_mb()  # model and batch loaded
    step()
    step_s = statistics.median(step() for _ in range(spec["steps"]))
    return {"source": QG.__file__, "links_per_set": batch.edge_index.size(1) / spec["batch"], "step_s": step_s,
            "graphs_per_s": spec["batch"] / step_s, "peak_mb": _peak_rss_mb(),
            "growth_mb": _peak_rss_mb() - rss_before}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def table_kernels(args) -> list[dict]:
    import torch

    torch.set_num_threads(args.threads)
    trees = {"before": _load_module(args.before_src), "after": _load_module(THIS_SRC)}
    rows = []
    print("| batch | links | product | before ms | after ms | before / after |\n|---:|---:|---|---:|---:|---:|")
    for batch in args.batches:
        edge_index, num_nodes = _random_causal_links(batch, 1024, 28_800)
        query, key = torch.randn(num_nodes, 2, 128), torch.randn(num_nodes, 2, 128)
        weights = torch.rand(edge_index.size(1), 2)
        products = {}
        for name, module in trees.items():
            adjacency = module.Adjacency.from_edge_index(edge_index, num_nodes)
            operand = adjacency.blocks(2) if hasattr(adjacency, "blocks") else adjacency
            flat = weights.reshape(-1) if hasattr(adjacency, "blocks") else weights
            products[name] = {"sddmm": lambda m=module, a=operand: m._sddmm(a, query, key),
                              "spmm": lambda m=module, a=operand, w=flat: m._spmm(a, w, query),
                              "spmm transposed": lambda m=module, a=operand, w=flat: m._spmm(a, w, query, True)}
        times = {(name, product): [] for name in trees for product in products[name]}
        for _ in range(args.repeats + 1):  # the first round warms up and is dropped
            for (name, product), measured in times.items():
                start = time.perf_counter()
                products[name][product]()
                measured.append(time.perf_counter() - start)
        for product in products["after"]:
            before, after = (1e3 * statistics.median(times[name, product][1:]) for name in ("before", "after"))
            rows.append({"batch": batch, "links": edge_index.size(1), "product": product, "before_ms": before,
                         "after_ms": after, "load_average": os.getloadavg()})
            print(f"| {batch} | {edge_index.size(1):,} | {product} | {before:.1f} | {after:.1f} | "
                  f"{before / after:.2f} |", flush=True)
    return rows


def _load_module(src: Path):
    # the layer is in models/ since the package has subpackages; a tree from before that has it at the top
    path = next(p for p in (src / "QuantumGrav" / "models" / "sparse_attention.py",
                            src / "QuantumGrav" / "sparse_attention.py") if p.is_file())
    spec = importlib.util.spec_from_file_location(f"sparse_attention_{abs(hash(src))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _random_causal_links(batch: int, n: int, links: int):
    """``batch`` graphs of n nodes with about ``links`` distinct edges lower -> higher index each."""
    import torch

    generator = torch.Generator().manual_seed(0)
    edges = []
    for graph in range(batch):
        ends = torch.randint(0, n, (2, links), generator=generator)
        lower, upper = ends.min(0).values, ends.max(0).values
        keep = lower != upper
        edges.append(torch.unique(torch.stack([lower[keep], upper[keep]]), dim=1) + graph * n)
    return torch.cat(edges, dim=1), batch * n


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
    parser.add_argument("--tables", nargs="+", default=["step", "kernels"], choices=["step", "kernels"])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32], help="kernels: graphs per batch")
    parser.add_argument("--repeats", type=int, default=9, help="kernels: alternations")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.before_src is None or not (args.before_src / "QuantumGrav" / "__init__.py").is_file():
        parser.error(f"--before-src must be a source tree holding QuantumGrav/ (got {args.before_src}); make one "
                     "with `git archive <rev> QuantumGravPy/src | tar -x -C /tmp/qg_before` and pass /tmp/qg_before/QuantumGravPy/src")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results["before_src"] = str(args.before_src)
    if "kernels" in args.tables:
        results["kernels"] = table_kernels(args)
    if "step" in args.tables:
        rows = table_step(args)  # replaces the stored rows of the same N and batch, keeps the others
        measured = {(row["n"], row["batch"]) for row in rows}
        results["step"] = [row for row in results.get("step", []) if (row["n"], row["batch"]) not in measured] + rows
    # imported here, not at the top: the --worker processes must import the --before-src tree, and study_results
    # puts this tree's source first on sys.path
    import study_results  # benchmarks/study_results.py: written whole or not at all

    study_results.write_json(RESULTS, results, indent=1)


def table_step(args) -> list[dict]:
    rows = []
    print("| N | batch | links/set | before graphs/s | after graphs/s | after / before | growth MB before / after |\n"
          "|---:|---:|---:|---|---|---:|---|")
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
                   "growth_mb": {k: [r["growth_mb"] for r in v] for k, v in runs.items()},
                   "load_average": os.getloadavg()}
            rows.append(row)
            print(f"| {n:,} | {args.batch} | {row['links_per_set']:,.0f} | "
                  f"{', '.join(f'{r:.2f}' for r in rates['before'])} | "
                  f"{', '.join(f'{r:.2f}' for r in rates['after'])} | {ratio:.2f} | "
                  f"{max(r['growth_mb'] for r in runs['before']):,.0f} / "
                  f"{max(r['growth_mb'] for r in runs['after']):,.0f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
