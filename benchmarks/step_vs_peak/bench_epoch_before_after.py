#!/usr/bin/env python3
"""The default job's epoch with this tree against another tree's QuantumGrav (and this tree compiled), paired:
the same data, the same command, alternated run by run.

    mkdir /tmp/qg_before && git archive 44088b4 QuantumGravPy/src | tar -x -C /tmp/qg_before
    python benchmarks/step_vs_peak/bench_epoch_before_after.py --before-src /tmp/qg_before/QuantumGravPy/src \\
        --nproc 1 2 --repetitions 3 --epochs 3 --samples 600 --compiled

Each run is the default job (``configs/train.yaml``: sets of 64 to 128 elements, batch 32 per process, its model;
``--samples`` of them: the default 2,000, or fewer for the same steps and fewer of them per epoch) started as ``make train`` starts it (``QG.launch`` with ``--nproc`` processes, threads as the launcher
sets them), in a fresh process whose PYTHONPATH puts the tree's source first, for ``--epochs`` epochs (no early
stop can come that soon; no test-split baselines or figures, which come after the epochs). Per epoch: its
seconds as the run records them (training, the batch norm pass and validation: what an epoch costs), its
training graphs/s, and rank 0's CPU seconds (``epoch_clock.EpochClock``: every thread of the process; on a shared
machine CPU time moves far less with the others' load than wall time does). The first epoch holds the start-up (and, compiled, the compiling) and is reported apart; the
"epoch" of a run is the median of the later ones. Each repetition runs every contender once per process count,
in an order rotated per repetition; the load average is recorded beside every run. Stored whole after every
run in ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
THIS_SRC = REPO / "QuantumGravPy" / "src"
RESULTS = Path(__file__).resolve().parent / "results_epoch_before_after.json"


def worker(spec: dict) -> None:
    """One run, in this process (PYTHONPATH: the tree's source, then this folder): QG.launch as ``make train``
    starts it, the EpochClock on every rank."""
    import QuantumGrav as QG
    from epoch_clock import EpochClock

    overrides = {"training.num_epochs": spec["epochs"], "data.num_samples": spec["samples"], "data.root": spec["data"], "training.path": spec["runs"],
                 "training.run_name": spec["name"], "training.progress_bar": False, "testing.baselines": False,
                 "training.figures": False, **({"training.compile": True} if spec["compiled"] else {})}
    QG.setup_logging(level="WARNING")
    QG.launch(QG.load_config(REPO / "configs" / "train.yaml", overrides), nproc=spec["nproc"],
              callbacks=[EpochClock(spec["clock"])])


def train(src: Path, nproc: int, epochs: int, samples: int, workdir: Path, name: str, compiled: bool,
          threads: int | None = None) -> dict:
    clock = workdir / f"{name}.jsonl"
    spec = {"nproc": nproc, "epochs": epochs, "samples": samples, "data": str(workdir / "data"), "runs": str(workdir / "runs"),
            "name": name, "compiled": compiled, "clock": str(clock)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(Path(__file__).resolve().parent)]),
           **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    load_before = os.getloadavg()
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                          text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    epochs_seen = [json.loads(line) for line in clock.read_text().splitlines()]
    seconds = [e["epoch_time_s"] for e in epochs_seen]
    cpu = [e["cpu_s"] for e in epochs_seen]
    rates = [e["graphs_per_s"] for e in epochs_seen]
    return {"epoch_s": seconds, "epoch_cpu_s": cpu, "graphs_per_s": rates,
            "steady_epoch_s": statistics.median(seconds[1:]), "steady_epoch_cpu_s": statistics.median(cpu[1:]),
            "steady_graphs_per_s": statistics.median(rates[1:]), "load_before": load_before,
            "load_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-src", type=Path, help="the QuantumGrav source tree to compare with")
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2000,
                        help="causal sets generated (the default job's 2,000; fewer: the same steps, fewer per epoch)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS of a one-process run (default: torch's, all cores; DDP ranks: the "
                             "launcher's share)")
    parser.add_argument("--compiled", action="store_true", help="also this tree with training.compile: true")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.before_src is None or not (args.before_src / "QuantumGrav" / "__init__.py").is_file():
        parser.error(f"--before-src must hold QuantumGrav/ (got {args.before_src})")
    sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "benchmarks" / "training_loop")]  # study_results, bench_training
    import study_results  # benchmarks/study_results.py: written whole or not at all
    from bench_training import cpu_model

    contenders = [("before", args.before_src, False), ("after", THIS_SRC, False)]
    if args.compiled:
        contenders.append(("after, compiled", THIS_SRC, True))
    results = {"command": " ".join(sys.argv), "threads": args.threads, "cpu": cpu_model(), "cpus": os.cpu_count(),
               "trees": {"before": str(args.before_src), "after": str(THIS_SRC)},
               "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench_epoch_") as folder:
        workdir = Path(folder)
        for repetition in range(args.repetitions):
            for nproc in args.nproc:
                shift = repetition % len(contenders)
                for label, src, compiled in contenders[shift:] + contenders[:shift]:
                    name = f"{label.replace(', ', '_')}_{nproc}_{repetition}"
                    run = {"contender": label, "nproc": nproc, "repetition": repetition,
                           **train(src, nproc, args.epochs, args.samples, workdir, name, compiled, args.threads)}
                    results["runs"].append(run)
                    print(f"repetition {repetition + 1}, {nproc} process(es), {label}: epoch {run['steady_epoch_s']:.1f}"
                          f" s, {run['steady_epoch_cpu_s']:.1f} CPU s of rank 0 (first {run['epoch_s'][0]:.1f} s), "
                          f"{run['steady_graphs_per_s']:.1f} graphs/s; load "
                          f"{run['load_before'][0]:.1f} -> {run['load_after'][0]:.1f}", flush=True)
                    study_results.write_json(args.json, results, indent=1)
    print_table(results)


def print_table(results: dict) -> None:
    print("\n| processes | contender | epoch s (median of runs) | rank 0's CPU s per epoch | first epoch s | graphs/s "
          "| before / this, wall | before / this, CPU |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for nproc in sorted({r["nproc"] for r in results["runs"]}):
        rows = [r for r in results["runs"] if r["nproc"] == nproc]
        before = statistics.median(r["steady_epoch_s"] for r in rows if r["contender"] == "before")
        before_cpu = statistics.median(r["steady_epoch_cpu_s"] for r in rows if r["contender"] == "before")
        for contender in dict.fromkeys(r["contender"] for r in rows):
            mine = [r for r in rows if r["contender"] == contender]
            epoch = statistics.median(r["steady_epoch_s"] for r in mine)
            cpu = statistics.median(r["steady_epoch_cpu_s"] for r in mine)
            print(f"| {nproc} | {contender} | {epoch:.1f} | {cpu:.1f} | "
                  f"{statistics.median(r['epoch_s'][0] for r in mine):.1f} | "
                  f"{statistics.median(r['steady_graphs_per_s'] for r in mine):.1f} | {before / epoch:.2f} | "
                  f"{before_cpu / cpu:.2f} |")


if __name__ == "__main__":
    main()
