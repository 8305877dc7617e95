#!/usr/bin/env python3
"""Does every DDP job exit? Run users' scripts many times and count the runs that never ended.

    python benchmarks/stress_teardown.py                      # 40 runs per case (about 30 min on 2 cores)
    python benchmarks/stress_teardown.py --runs 10 --world-sizes 3 --scripts torchrun

A teardown race strikes one run in a few, so one green run proves nothing: this runs the two
scripts of the DDP guide (QuantumGravPy/tests/user_scripts/: the torchrun script and the
``mp.spawn`` script, copied verbatim) and the library's own launcher (``launch``: ``python -m
QuantumGrav train --nproc N``, workers forked from QG.launch's fork server) against a tiny config
and prints, per script and world size, how many runs finished, failed, or hung (still running
``--hang-after`` seconds after rank 0's last line: "Process 0 cleanup completed", or the run summary
of ``launch``). Hung runs are killed, with every process of the job.

The scripts read ``configs/train_ddp.yaml`` next to themselves and put ``src`` on sys.path, so
each runs in a small project folder made here; the spawn script's two constants (``world_size =
3`` and ``master_port = "12355"``) are the only lines changed, to set the world size and a free port.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
USER_SCRIPTS = REPO / "QuantumGravPy" / "tests" / "user_scripts"
SRC = REPO / "QuantumGravPy" / "src"
sys.path.insert(0, str(SRC))

# configs/train_ddp.yaml as the hang was first measured: 2 epochs on 300 causal sets, on the CPU.
SHRINK = {"training.num_epochs": 2, "training.device": "cpu", "training.progress_bar": False,
          "data.num_samples": 300, "parallel.timeout_s": 60}
DONE_LINES = {"torchrun": "Process 0 cleanup completed", "mp_spawn": "Process 0 cleanup completed",
              "launch": "=== QuantumGrav run summary ==="}


@dataclass
class Outcome:
    exit_code: int | None  # None: hung and killed
    seconds: float
    output: str = field(repr=False, default="")


class UserProject:
    """A folder laid out as the two scripts expect: script, ``configs/train_ddp.yaml`` and ``src``."""

    def __init__(self, root: Path, overrides: dict | None = None, library: Path = SRC):
        import QuantumGrav as QG

        self.root = root
        # The file's own keys only (not the validated config with every default), so that an older
        # version of the library (--library) reads it too.
        config = yaml.load((REPO / "configs" / "train_ddp.yaml").read_text(), QG.get_loader())
        text = QG.dump_config(QG.apply_overrides(config, {**SHRINK, "training.path": str(root / "runs"),
                                                          "data.root": str(root / "data"), **(overrides or {})}))
        for folder in (root, root / "examples"):
            (folder / "configs").mkdir(parents=True, exist_ok=True)
            (folder / "configs" / "train_ddp.yaml").write_text(text)
        (root / "src").symlink_to(library)
        shutil.copy(USER_SCRIPTS / "train_ddp_torchrun.py", root / "train_ddp_torchrun.py")
        self.spawn_template = (USER_SCRIPTS / "train_ddp_mp_spawn.py").read_text()

    def command(self, script: str, world_size: int) -> list[str]:
        from QuantumGrav.distributed import find_free_port

        port = find_free_port()
        if script == "torchrun":
            return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world_size}",
                    f"--master_port={port}", str(self.root / "train_ddp_torchrun.py")]
        if script == "launch":  # the CLI of the library in src (as the scripts import it)
            return [sys.executable, "-c", "import sys; sys.path.insert(0, 'src'); from QuantumGrav.cli import main; "
                    "sys.exit(main())", "train", "--config", "configs/train_ddp.yaml", "--nproc", str(world_size),
                    "--set", f"parallel.master_port={port}"]
        text = self.spawn_template
        for old, new in (("world_size = 3", f"world_size = {world_size}"),
                         ('master_port = "12355"', f'master_port = "{port}"')):
            if old not in text:
                raise RuntimeError(f"the spawn script no longer contains {old!r}")
            text = text.replace(old, new)
        path = self.root / "examples" / "train_ddp_mp_spawn.py"
        path.write_text(text)
        return [sys.executable, str(path)]


def run_once(command: list[str], cwd: Path, hang_after_s: float, limit_s: float, done_line: str) -> Outcome:
    """Run a job; it hangs if still alive ``hang_after_s`` after rank 0's last line (or past ``limit_s``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    lines: list[str] = []
    done_at: list[float] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            if done_line in line and not done_at:
                done_at.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while process.poll() is None:
        now = time.monotonic()
        if (done_at and now - done_at[0] > hang_after_s) or now - started > limit_s:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and every worker it started
            process.wait()
            reader.join(5)
            return Outcome(None, time.monotonic() - started, "".join(lines))
        time.sleep(0.1)
    reader.join(5)
    return Outcome(process.returncode, time.monotonic() - started, "".join(lines))


def stress(script: str, world_size: int, runs: int, project: UserProject, hang_after_s: float = 60.0,
           limit_s: float = 300.0, on_run=None, stop_at: float = float("inf")) -> list[Outcome]:
    """Up to ``runs`` runs, none started after the monotonic time ``stop_at``."""
    outcomes = []
    for index in range(runs):
        if time.monotonic() > stop_at:
            break
        outcome = run_once(project.command(script, world_size), project.root, hang_after_s, limit_s,
                           DONE_LINES[script])
        outcomes.append(outcome)
        if on_run:
            on_run(index, outcome)
    return outcomes


def table_row(script: str, world_size: int, outcomes: list[Outcome]) -> str:
    if not outcomes:
        return f"| {script} | {world_size} | 0 | - | - | - | - |"
    hangs = sum(o.exit_code is None for o in outcomes)
    failed = sum(o.exit_code not in (None, 0) for o in outcomes)
    median = statistics.median(o.seconds for o in outcomes)
    return f"| {script} | {world_size} | {len(outcomes)} | {len(outcomes) - hangs - failed} | {failed} | {hangs} " \
           f"| {median:.1f} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs per script and world size (default: 40)")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--scripts", nargs="+", choices=sorted(DONE_LINES),
                        default=["torchrun", "mp_spawn", "launch"])
    parser.add_argument("--hang-after", type=float, default=60.0,
                        help="seconds after rank 0's last line at which a job still running counts as hung")
    parser.add_argument("--max-minutes", type=float, default=float("inf"),
                        help="start no run after this many minutes; the table counts the runs made")
    parser.add_argument("--library", type=Path, default=SRC,
                        help="the QuantumGrav source folder the scripts import (to measure another version)")
    args = parser.parse_args()
    stop_at = time.monotonic() + 60 * args.max_minutes
    rows = []
    with tempfile.TemporaryDirectory(prefix="qg-stress-") as folder:
        project = UserProject(Path(folder), library=args.library.resolve())
        for script in args.scripts:
            for world_size in args.world_sizes:
                def report(index: int, outcome: Outcome) -> None:
                    state = "HUNG" if outcome.exit_code is None else f"exit {outcome.exit_code}"
                    print(f"{script} world_size={world_size} run {index + 1}/{args.runs}: {state} "
                          f"({outcome.seconds:.1f} s)", flush=True)
                    if outcome.exit_code not in (0,):
                        print("".join(outcome.output.splitlines(keepends=True)[-15:]), flush=True)

                outcomes = stress(script, world_size, args.runs, project, args.hang_after, on_run=report,
                                  stop_at=stop_at)
                rows.append(table_row(script, world_size, outcomes))
    print("\n| script | world size | runs | exited 0 | failed | hung |  median s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
