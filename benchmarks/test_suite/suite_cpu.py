#!/usr/bin/env python3
"""Where the test suite's time goes: each test file run alone, its CPU seconds (every process it starts) and wall.

    .venv/bin/python benchmarks/test_suite/suite_cpu.py                     # every file of `make test`, about 35 min
    .venv/bin/python benchmarks/test_suite/suite_cpu.py --files test_docs.py 06_fault_tolerance.ipynb

`make test` on 2 cores is CPU-bound (both cores busy for the whole run), so its time is about the suite's CPU
seconds over the cores, and what to cut is read from CPU, not wall. A file's processes are not all its
children (torchrun workers under SLURM's daemons, processes that outlive their parent), so the CPU is the
machine's: the busy time of /proc/stat over the file's run, on a machine where nothing else runs (the 1-minute
load average before each file is stored with it; it lags, so after a heavy file it is still about 1). Run alone, a
file pays once what the suite's worker shares between files (its pytest process, the first import of torch),
so each file's CPU is given beyond pytest's own start (measured once: a run that selects no test), and the
total is still an upper bound of the suite's CPU. Prints a table, heaviest first; ``--json`` stores it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NBVAL = ["--nbval", "--nbval-sanitize-with", "notebooks/sanitize.cfg"]  # as the Makefile's test target


def busy_seconds() -> float:
    """The machine's CPU seconds spent busy so far: user, nice, system, irq, softirq and steal of /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def suite_files() -> list[Path]:
    """The files `make test` runs: the test modules and the notebooks nbval executes."""
    modules = sorted((REPO / "QuantumGravPy" / "tests").glob("test_*.py"))
    return modules + sorted((REPO / "notebooks").glob("*.ipynb"))


def measure(path: Path, timeout_s: float, *selection: str) -> dict:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path.relative_to(REPO)), *NBVAL,
               *selection]
    load = os.getloadavg()[0]
    busy, start = busy_seconds(), time.monotonic()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # as make
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall, cpu = time.monotonic() - start, busy_seconds() - busy
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    return {"file": path.name, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "exit_code": done.returncode,
            "load_before": round(load, 2), "pytest": summary}


def table(rows: list[dict], cores: int) -> str:
    total_cpu = sum(r["cpu_s"] for r in rows)
    lines = ["| file | CPU s | share | wall s | load before | pytest |", "|---|---:|---:|---:|---:|---|"]
    for r in sorted(rows, key=lambda r: -r["cpu_s"]):
        lines.append(f"| {r['file']} | {r['cpu_s']:.0f} | {100 * r['cpu_s'] / total_cpu:.1f}% | {r['wall_s']:.0f} "
                     f"| {r['load_before']:.2f} | {r['pytest']} |")
    lines.append(f"\n{len(rows)} files: {total_cpu:.0f} CPU s in all, {total_cpu / cores:.0f} s on {cores} cores "
                 f"at best; run alone they took {sum(r['wall_s'] for r in rows):.0f} s of wall one after another")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", nargs="+", help="file names (test_docs.py, 03_ddp_by_hand.ipynb); default: all")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds a file may take")
    parser.add_argument("--json", type=Path, help="store the rows and the run's details here")
    args = parser.parse_args()
    files = suite_files()
    if args.files:
        unknown = sorted(set(args.files) - {f.name for f in files})
        if unknown:
            parser.exit(2, f"error: --files: not a file of the suite: {', '.join(unknown)}\n")
        files = [f for f in files if f.name in args.files]
    # pytest's own start (plugins, the conftests' imports of torch and QuantumGrav): a file's selection of no test
    start = measure(REPO / "QuantumGravPy" / "tests" / "test_package_layout.py", args.timeout, "-k", "no_such_test")
    print(f"pytest's start alone: {start['cpu_s']:.0f} CPU s, {start['wall_s']:.0f} s (subtracted below)", flush=True)
    rows = []
    for path in files:
        rows.append(measure(path, args.timeout))
        rows[-1]["cpu_s"] = round(max(rows[-1]["cpu_s"] - start["cpu_s"], 0.0), 1)
        print(f"{rows[-1]['file']}: {rows[-1]['cpu_s']:.0f} CPU s, {rows[-1]['wall_s']:.0f} s, {rows[-1]['pytest']}",
              flush=True)
    cores = os.cpu_count() or 1
    print(table(rows, cores))
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        meta = {"command": " ".join(["benchmarks/test_suite/suite_cpu.py", *sys.argv[1:]]), "commit": commit.stdout.strip(),
                "pytest_start": start,
                "cores": cores, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "python": sys.version.split()[0]}
        partial = args.json.with_suffix(".partial")
        partial.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        partial.replace(args.json)


if __name__ == "__main__":
    main()
