#!/usr/bin/env python3
"""What a fresh process pays to import QuantumGrav and exit, with the garbage collector handled as the package
does it and as CPython would by default.

    .venv/bin/python benchmarks/startup/bench_startup.py                  # 7 runs of each variant, about 4 min
    .venv/bin/python benchmarks/startup/bench_startup.py --runs 5 --json benchmarks/startup/results_startup.json

Every torchrun worker, CLI command, Jupyter kernel and fork server imports torch, torch._dynamo (PyG imports
it, and so does every optimizer) and PyG: about half a million long-lived objects. ``QuantumGrav/__init__.py``
pauses the cyclic garbage collector during that import and freezes what exists afterwards (``gc.freeze``), so
that neither the collections the import triggers nor the one at interpreter exit traverse them again. The
"default collector" variants run the same command with ``gc.disable`` and ``gc.freeze`` made no-ops before the
import, which is the package without that handling. Each process's CPU seconds (user + system, its children
included) come from ``getrusage``; the variants alternate, run by run, so that a slower minute of the machine
hits both. Prints a table of medians; ``--json`` stores every run.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
DEFAULT_COLLECTOR = "import gc; gc.disable = gc.freeze = lambda: None; "
CLI_TRAIN = ("import runpy, sys; sys.argv = ['QuantumGrav', 'train', '--config', 'configs/train.yaml', "
             "'--set', 'training.path={path}']; runpy.run_module('QuantumGrav', run_name='__main__')")
WORKLOADS = {
    "import QuantumGrav, exit": "import QuantumGrav",
    "python -m QuantumGrav train (smoke test), exit": CLI_TRAIN,
}


def cpu_seconds(code: str) -> float:
    """CPU seconds (user + system) of a fresh interpreter running ``code`` in the repository."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as run_dir:
        env = {**os.environ, "QUANTUMGRAV_SMOKE_TEST": "1"}
        done = subprocess.run([sys.executable, "-c", code.format(path=run_dir)], cwd=REPO, env=env,
                              capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_startup: this failed ({done.returncode}):\n{code}\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(runs: int) -> list[dict]:
    rows = []
    for workload, code in WORKLOADS.items():
        samples = {"as shipped": [], "default collector": []}
        for _ in range(runs):
            samples["as shipped"].append(cpu_seconds(code))
            samples["default collector"].append(cpu_seconds(DEFAULT_COLLECTOR + code))
        for variant, values in samples.items():
            rows.append({"workload": workload, "collector": variant, "runs": runs,
                         "median_cpu_s": round(statistics.median(values), 2),
                         "min_cpu_s": round(min(values), 2), "max_cpu_s": round(max(values), 2),
                         "cpu_s": [round(v, 2) for v in values]})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| process | collector | CPU s, median | min | max | runs |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['workload']} | {row['collector']} | {row['median_cpu_s']:.2f} | "
                     f"{row['min_cpu_s']:.2f} | {row['max_cpu_s']:.2f} | {row['runs']} |")
    by_key = {(r["workload"], r["collector"]): r["median_cpu_s"] for r in rows}
    for workload in WORKLOADS:
        shipped, default = by_key[(workload, "as shipped")], by_key[(workload, "default collector")]
        lines.append(f"\n{workload}: {default - shipped:.2f} CPU s saved per process "
                     f"({100 * (default - shipped) / default:.0f} %)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="processes per variant and workload (default 7)")
    parser.add_argument("--json", type=Path, help="store every run here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    load = os.getloadavg()[0]
    rows = measure(args.runs)
    print(table(rows))
    if args.json:
        meta = {"python": platform.python_version(), "machine": platform.machine(), "cores": os.cpu_count(),
                "load_before": round(load, 2)}
        import study_results  # benchmarks/study_results.py: written whole or not at all

        study_results.write_json(args.json, {"meta": meta, "rows": rows}, indent=1)
        print(f"stored: {args.json}")


if __name__ == "__main__":
    main()
