#!/usr/bin/env python3
"""Does every DDP job exit? Run users' scripts many times and count the runs that never ended.

    python benchmarks/fault_tolerance/stress_teardown.py                      # 40 runs per case (about 30 min on 2 cores)
    python benchmarks/fault_tolerance/stress_teardown.py --runs 10 --world-sizes 3 --scripts torchrun

A teardown race strikes one run in a few, so one green run proves nothing: this runs the two
scripts of the DDP guide (QuantumGravPy/tests/user_scripts/: the torchrun script and the
``mp.spawn`` script, copied verbatim) and the library's own launcher (``launch``: ``python -m
QuantumGrav train --nproc N``, workers forked from QG.launch's fork server) against a tiny config
and prints, per script and world size, how many runs finished, failed, or hung (still running
``--hang-after`` seconds after rank 0's last line: "Process 0 cleanup completed", or the run summary
of ``launch``). Hung runs are killed, with every process of the job.

``--kill`` runs the other half of "nothing left running" (issue 25): a job started by ``QG.launch`` (or
``QG.tune``) from a script or a Jupyter kernel, whose launching process is killed alone with ``kill -9``
once rank 0 has logged its first epoch (as the out-of-memory killer kills it), or whose kernel Jupyter
restarts. It counts the runs after which every process the launcher had started (fork server, workers,
resource tracker, DataLoader workers) was gone within ``--clean-within`` seconds:

    python benchmarks/fault_tolerance/stress_teardown.py --kill kernel --runs 10 --world-sizes 2

``--kill torchrun_tune`` (and ``torchrun_tune_random``) kills a ``torchrun ... -m QuantumGrav tune`` job with its
process group, as a lost node does, at rank 0's first epoch (or at a random moment of its start); torchrun's ranks
live in sessions of their own and must stop by themselves. A rank left running is made to print its Python stack.

The scripts read ``configs/train_ddp.yaml`` next to themselves and put ``src`` on sys.path, so
each runs in a small project folder made here; the spawn script's two constants (``world_size =
3`` and ``master_port = "12355"``) are the only lines changed, to set the world size and a free port.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
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
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
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

        self.root, self.library = root, library
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

    def study_config(self) -> Path:
        """configs/train_ddp.yaml as a study of two trials over the pooling (what a tune worker trains)."""
        path = self.root / "configs" / "tune_ddp.yaml"
        if not path.exists():
            text = (self.root / "configs" / "train_ddp.yaml").read_text()
            path.write_text(text + "\ntune:\n  study: killed\n  trials: 2\n  space:\n"
                                   "    model.pooling: {choices: [mean, max]}\n")
        return path

    def command(self, script: str, world_size: int) -> list[str]:
        from QuantumGrav.distributed.environment import find_free_port

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


# ------------------------------------------------------------------------- kill what started the job
KILL_CASES = ("script", "kernel", "kernel_restart", "tune_kernel", "torchrun_tune", "torchrun_tune_random")
LONG_RUN = {"training.num_epochs": 100_000, "early_stopping.enabled": False}  # still training when killed
RANDOM_KILL_WITHIN_S = 8.0  # torchrun_tune_random: the kill comes at a moment drawn up to this after the start (about
# when rank 0 logs its first epoch on an idle 2-core machine: start-up, data and the study's set-up come before)


@dataclass
class KillOutcome:
    left: list[str]  # the processes the launcher had started that were still alive after the wait
    seconds: float  # from the kill until the last of them was gone (or the wait, where some were left)
    output: str = field(repr=False, default="")
    started: list[str] = field(default_factory=list)  # what the launching process had started, at the kill
    killed_at_s: float | None = None  # seconds from the job's start to the kill, where the case draws it


def job_code(config_path: Path, world_size: int, overrides: dict, library: Path = SRC, tune: bool = False) -> str:
    """What a notebook cell or a script runs: QG.launch (or QG.tune) of the config at ``config_path``."""
    call = (f"QG.tune({str(config_path)!r}, nproc={world_size}, overrides={overrides!r})" if tune else
            f"QG.launch(QG.load_config({str(config_path)!r}, {overrides!r}), nproc={world_size})")
    return f"import sys\nsys.path.insert(0, {str(library)!r})\nimport QuantumGrav as QG\n{call}\n"


def wait_for_training(folder: Path, limit_s: float, alive) -> bool:
    """Until rank 0 has written its first epoch's metrics under ``folder`` (False: the job ended or
    ``limit_s`` passed first)."""
    return wait_for(lambda: any(folder.rglob("metrics.csv")), limit_s, alive)


def wait_for(condition, limit_s: float, alive) -> bool:
    """Poll ``condition()`` until it holds (True), or the job is no longer ``alive()`` or ``limit_s`` passed."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and alive():
        if condition():
            return True
        time.sleep(0.2)
    return False


def kill_and_wait_until_gone(processes: list, kill, within_s: float) -> KillOutcome:
    """``kill()``, then poll until every one of ``processes`` is gone (psutil: a zombie whose parent died is reaped
    by init). What each was (:func:`_describe`) is read before the kill: a process that stops at once can no
    longer say."""
    import psutil

    described = [_describe(process) for process in processes]
    started = time.monotonic()
    kill()
    _, alive = psutil.wait_procs(processes, timeout=within_s)
    return KillOutcome([_describe(process) for process in alive], time.monotonic() - started, started=described)


def _describe(process) -> str:
    import psutil

    with contextlib.suppress(psutil.Error):
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    return f"{process.pid} (gone)"


def job_environment() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


def write_job_script(folder: Path, config_path: Path, world_size: int, overrides: dict, library: Path = SRC) -> Path:
    """folder/job.py: job_code under the main guard, as a user's script runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "job.py"
    code = job_code(config_path, world_size, overrides, library)
    script.write_text("if __name__ == '__main__':\n" + "".join(f"    {line}\n" for line in code.splitlines()))
    return script


def kill_script(folder: Path, config_path: Path, world_size: int, overrides: dict, within_s: float = 60.0,
                limit_s: float = 300.0, library: Path = SRC, ready: Any = None) -> KillOutcome:
    """A script with the main guard runs QG.launch (its runs under ``folder``, where ``overrides`` put
    them); once training (or once ``ready(process, log)`` says so), its process alone gets SIGKILL."""
    import psutil

    script = write_job_script(folder, config_path, world_size, overrides, library)
    log = folder / "output.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, str(script)], cwd=folder, env=job_environment(), stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        if ready is None:
            started = wait_for_training(folder, limit_s, lambda: process.poll() is None)
        else:
            started = wait_for(lambda: ready(process, log), limit_s, lambda: process.poll() is None)
        if not started:
            return KillOutcome(["the job never got where it was to be killed"], 0.0, log.read_text())
        started_by_it = psutil.Process(process.pid).children(recursive=True)
        outcome = kill_and_wait_until_gone(started_by_it, lambda: (process.kill(), process.wait()), within_s)
    finally:
        if process.poll() is None:
            process.kill()
    outcome.output = log.read_text()
    return outcome


def kill_kernel(folder: Path, config_path: Path, world_size: int, overrides: dict, how: str = "kill",
                tune: bool = False, within_s: float = 60.0, limit_s: float = 300.0,
                library: Path = SRC) -> KillOutcome:
    """A Jupyter kernel (driven with jupyter_client, as the notebook server drives it) runs QG.launch or
    QG.tune; once training, the kernel's process alone gets SIGKILL (``how="kill"``: the out-of-memory
    killer) or Jupyter restarts the kernel (``how="restart"``)."""
    import psutil
    from jupyter_client.manager import KernelManager

    folder.mkdir(parents=True, exist_ok=True)
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=job_environment(), cwd=str(folder))
    client = manager.client()
    client.start_channels()
    messages: list[str] = []
    try:
        client.wait_for_ready(timeout=120)
        client.execute(job_code(config_path, world_size, overrides, library, tune))
        kernel = psutil.Process(manager.provisioner.process.pid)
        trained = wait_for_training(folder, limit_s, lambda: kernel.is_running() and _collect(client, messages))
        if not trained:
            return KillOutcome(["the job never started training"], 0.0, "".join(messages))
        started_by_it = kernel.children(recursive=True)
        kill = (lambda: manager.restart_kernel(now=True)) if how == "restart" else kernel.kill
        outcome = kill_and_wait_until_gone(started_by_it, kill, within_s)
        if how == "restart" and not manager.is_alive():
            outcome.left.append("the restarted kernel is not running")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    outcome.output = "".join(messages)
    return outcome


def kill_torchrun_tune(folder: Path, study_config: Path, world_size: int, overrides: dict, within_s: float = 60.0,
                       moment: float | str = "first_epoch", limit_s: float = 300.0,
                       library: Path = SRC) -> KillOutcome:
    """``torchrun --standalone -m QuantumGrav tune`` (what slurm_tune.sbatch runs on each node) killed with its
    process group by SIGKILL, as a lost node or a killed job step kills it, at ``moment``: "first_epoch" (once
    rank 0 has logged its first epoch), "ranks_started" (as soon as torchrun has started its ranks, which are
    then importing, preparing the data or setting the study up), or a number of seconds after the start (or the
    first epoch if that comes first).
    torchrun starts its ranks in sessions of their own, so the kill reaches the agent alone and each rank must
    stop by itself (``stop_when_the_agent_dies``). A rank still there after ``within_s`` gets SIGABRT, and with
    PYTHONFAULTHANDLER=1 its Python stack is in the output: where it waited."""
    import psutil

    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "output.log"
    settings = [f"{key}={value}" for key, value in overrides.items()]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
               "-m", "QuantumGrav", "tune", "--config", str(study_config)]
    command += [part for setting in settings for part in ("--set", setting)]
    env = {**job_environment(), "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join([str(library), os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as output:
        agent = subprocess.Popen(command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    begun = time.monotonic()
    try:
        alive = lambda: agent.poll() is None  # noqa: E731

        def ranks_started() -> bool:
            with contextlib.suppress(psutil.Error):
                return len(psutil.Process(agent.pid).children(recursive=True)) >= world_size
            return False

        if isinstance(moment, str):
            reached = wait_for_training(folder, limit_s, alive) if moment == "first_epoch" else \
                wait_for(ranks_started, limit_s, alive)
            if not reached:
                return KillOutcome([f"the job never got to {moment}"], 0.0, log.read_text())
        else:
            wait_for(lambda: any(folder.rglob("metrics.csv")), moment, alive)
        if not alive():
            return KillOutcome([f"torchrun ended before the kill (exit {agent.returncode})"], 0.0, log.read_text())
        ranks = psutil.Process(agent.pid).children(recursive=True)
        killed_at_s = time.monotonic() - begun
        outcome = kill_and_wait_until_gone(ranks, lambda: (os.killpg(agent.pid, signal.SIGKILL), agent.wait()),
                                           within_s)
        outcome.killed_at_s = killed_at_s
        print_stacks_and_kill(ranks)  # what is left
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    outcome.output = log.read_text()
    return outcome


def print_stacks_and_kill(processes: list) -> None:
    """SIGABRT to each process still there, so that one started with PYTHONFAULTHANDLER=1 prints its Python stack
    (where it waited) to its output, then SIGKILL to any that outlived that."""
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGABRT)
    psutil.wait_procs(processes, timeout=10)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _collect(client: Any, messages: list[str]) -> bool:
    """The kernel's output so far (stream text and errors) into ``messages``; True to go on waiting."""
    while True:
        try:
            message = client.get_iopub_msg(timeout=0.01)
        except Exception:  # queue.Empty: nothing more now
            return True
        content = message["content"]
        if message["msg_type"] == "stream":
            messages.append(content["text"])
        elif message["msg_type"] == "error":
            messages.append("\n".join(content["traceback"]))
            return False  # the cell failed: the job will not start


def kill_once(case: str, folder: Path, project: "UserProject", world_size: int, within_s: float) -> KillOutcome:
    overrides = {**LONG_RUN, "training.path": str(folder / "runs")}
    config = project.root / "configs" / "train_ddp.yaml"
    if case == "script":
        return kill_script(folder, config, world_size, overrides, within_s, library=project.library)
    if case == "tune_kernel":
        return kill_kernel(folder, project.study_config(), world_size, {**overrides, "tune.path": str(folder / "studies")},
                           tune=True, within_s=within_s, library=project.library)
    if case.startswith("torchrun_tune"):
        return kill_torchrun_tune(folder, project.study_config(), world_size,
                                  {**overrides, "tune.path": str(folder / "studies")}, within_s,
                                  random.uniform(0.0, RANDOM_KILL_WITHIN_S) if case == "torchrun_tune_random"
                                  else "first_epoch", library=project.library)
    how = "restart" if case == "kernel_restart" else "kill"
    return kill_kernel(folder, config, world_size, overrides, how, within_s=within_s, library=project.library)


def kill_table_row(case: str, world_size: int, outcomes: list[KillOutcome]) -> str:
    clean = [o for o in outcomes if not o.left]
    median = f"{statistics.median(o.seconds for o in clean):.1f}" if clean else "-"
    worst = f"{max(o.seconds for o in clean):.1f}" if clean else "-"
    return f"| {case} | {world_size} | {len(outcomes)} | {len(clean)} | {len(outcomes) - len(clean)} | {median} " \
           f"| {worst} |"


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
    parser.add_argument("--kill", nargs="+", choices=KILL_CASES,
                        help="instead of the scripts' exits: kill what started QG.launch/QG.tune (see above)")
    parser.add_argument("--clean-within", type=float, default=60.0,
                        help="--kill: seconds after the kill within which every process it started must be gone")
    parser.add_argument("--json", type=Path, help="--kill: also store each run's outcome in this file")
    args = parser.parse_args()
    stop_at = time.monotonic() + 60 * args.max_minutes
    rows = []
    with tempfile.TemporaryDirectory(prefix="qg-stress-") as folder:
        project = UserProject(Path(folder), library=args.library.resolve())
        if args.kill:
            return kill_main(args, project, stop_at)
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


def kill_main(args: argparse.Namespace, project: UserProject, stop_at: float) -> int:
    rows, stored = [], []
    for case in args.kill:
        for world_size in args.world_sizes:
            outcomes = []
            for index in range(args.runs):
                if time.monotonic() > stop_at:
                    break
                outcome = kill_once(case, project.root / f"{case}-{world_size}-{index}", project, world_size,
                                    args.clean_within)
                outcomes.append(outcome)
                state = f"LEFT {len(outcome.left)}" if outcome.left else "clean"
                when = "" if outcome.killed_at_s is None else f", killed {outcome.killed_at_s:.1f} s after its start"
                print(f"{case} world_size={world_size} run {index + 1}/{args.runs}: {state} of "
                      f"{len(outcome.started)} processes ({outcome.seconds:.1f} s after the kill{when})", flush=True)
                if outcome.left:
                    print("\n".join(outcome.left), "".join(outcome.output.splitlines(keepends=True)[-15:]),
                          sep="\n", flush=True)
            rows.append(kill_table_row(case, world_size, outcomes))
            stored += [{"case": case, "world_size": world_size, "run": index + 1, "processes": len(o.started),
                        "left": o.left, "seconds_to_all_gone": None if o.left else o.seconds,
                        "killed_at_s": o.killed_at_s} for index, o in enumerate(outcomes)]
    print(f"\n| killed | world size | runs | all gone within {args.clean_within:.0f} s | left running "
          "| median s to all gone | slowest s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        from QuantumGrav.common.files import atomic_write_text
        from QuantumGrav.common.processes import usable_cpu_count

        atomic_write_text(args.json, json.dumps({
            "command": " ".join(["python", *sys.argv]), "clean_within_s": args.clean_within,
            "load_average_after": os.getloadavg(), "usable_cores": usable_cpu_count(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": stored}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
