"""Training memory per rank against the size of the generated data set, with ``data.storage: disk``.

    .venv/bin/python benchmarks/memory/bench_memory_scaling.py [--sizes 5000 50000] [--n 32] [--train 2000]
    .venv/bin/python benchmarks/memory/bench_memory_scaling.py --storage memory disk   # memory for contrast

For each size the cache is generated first (``python -m QuantumGrav generate``, not measured), then a fresh
process builds ``QG.Trainer`` on ``configs/train.yaml`` (n_min = n_max = ``--n``) and trains one epoch of
``--train`` sets drawn at random from the whole training split (validation: a quarter of that), so every
size does the same work and only the data set's size differs. Printed per run: RSS (resident set) and
its anonymous part (``RssAnon`` of /proc/self/status: the process's own heap, what the data set would
grow if it were held in memory; file-backed pages are the shared libraries, and the shards are read with
``os.preadv``, so the page cache that holds them is counted in neither) and the peak RSS (``VmHWM``).

``--json FILE`` stores the rows with the command, the date and the load average:
``benchmarks/memory/results_memory_scaling.json`` is the run that docs/large_data.md quotes. With ``memory`` every rank
holds the collated data set; with ``disk`` it holds the index (a few dozen bytes per set).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
MB = 2**20


def _status_kb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise KeyError(field)


def overrides(root: str, size: int, n: int, storage: str) -> list[str]:
    return [f"data.root={root}", f"data.num_samples={size}", f"data.n_min={n}", f"data.n_max={n}",
            f"data.storage={storage}", "training.num_epochs=1", "training.progress_bar=false"]


def measure(config_overrides: list[str], runs: str, train_sets: int) -> dict[str, float]:
    """In this (fresh) process: build the trainer, train one epoch on ``train_sets`` sets, report memory."""
    import numpy as np
    import torch

    import QuantumGrav as QG
    from QuantumGrav.data.sources import subset
    from QuantumGrav.training.loaders import make_loader

    torch.set_num_threads(1)
    config = QG.load_config(str(REPO / "configs" / "train.yaml"), [*config_overrides, f"training.path={runs}"])
    trainer = QG.Trainer(config)
    rng = np.random.default_rng(0)
    train = sorted(rng.choice(trainer.split["train"], train_sets, replace=False).tolist())
    val = sorted(rng.choice(trainer.split["val"], train_sets // 4, replace=False).tolist())
    loaders = [make_loader(subset(trainer.dataset, indices), config.sections.loaders.training, None, trainer.device)
               for indices in (train, val)]
    trainer.run_training(*loaders)
    trainer.close()
    return {"rss_mb": _status_kb("VmRSS") / 1024, "anon_mb": _status_kb("RssAnon") / 1024,
            "peak_mb": _status_kb("VmHWM") / 1024}


def run(sizes: list[int], n: int, train_sets: int, storages: list[str]) -> list[tuple[str, int, dict]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "QuantumGravPy" / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            generate = [sys.executable, "-m", "QuantumGrav", "generate", "--config",
                        str(REPO / "configs" / "train.yaml")]
            for item in overrides(f"{tmp}/data", size, n, "disk"):
                generate += ["--set", item]
            subprocess.run(generate, check=True, env=env, stdout=subprocess.DEVNULL)
            for storage in storages:
                child = [sys.executable, __file__, "--child", json.dumps(overrides(f"{tmp}/data", size, n, storage)),
                         "--runs", f"{tmp}/runs", "--train", str(train_sets)]
                out = subprocess.run(child, check=True, env=env, capture_output=True, text=True).stdout
                rows.append((storage, size, json.loads(out.strip().splitlines()[-1])))
    return rows


def markdown_table(rows: list[tuple[str, int, dict]]) -> str:
    lines = ["| storage | sets in the data set | RSS MB | anonymous RSS MB | peak RSS MB |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {storage} | {size:,} | {m['rss_mb']:.0f} | {m['anon_mb']:.0f} | {m['peak_mb']:.0f} |"
              for storage, size, m in rows]
    return "\n".join(lines)


def verdict(rows: list[tuple[str, int, dict]]) -> str:
    disk = sorted((size, m) for storage, size, m in rows if storage == "disk")
    if len(disk) < 2:
        return ""
    (small, a), (large, b) = disk[0], disk[-1]
    change = (b["rss_mb"] - a["rss_mb"]) / a["rss_mb"]
    return (f"disk storage: RSS {a['rss_mb']:.0f} MB at {small:,} sets, {b['rss_mb']:.0f} MB at {large:,} sets: "
            f"{100 * change:+.1f}% ({'under' if abs(change) < 0.10 else 'NOT under'} 10%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000])
    parser.add_argument("--n", type=int, default=32, help="elements per causal set (n_min = n_max)")
    parser.add_argument("--train", type=int, default=2000, help="training sets per epoch (the same for every size)")
    parser.add_argument("--storage", nargs="+", choices=["memory", "disk"], default=["disk"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--runs", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also store the rows in this file")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(json.loads(args.child), args.runs, args.train)))
        return
    if min(args.sizes) < 2 * args.train:
        parser.error(f"--sizes must be at least twice --train ({args.train}): the epoch draws from the training split")
    load_before = os.getloadavg()
    rows = run(args.sizes, args.n, args.train, args.storage)
    print(f"N = {args.n}, one epoch of {args.train} training sets, one rank\n")
    print(markdown_table(rows))
    print("\n" + verdict(rows))
    if args.json:
        import study_results  # benchmarks/study_results.py: written whole or not at all

        study_results.write_json(args.json, {
            "command": " ".join(["python", *sys.argv]), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(), "n": args.n,
            "train": args.train, "rows": [{"storage": storage, "sets": size, **m} for storage, size, m in rows]},
            indent=1)


if __name__ == "__main__":
    main()
