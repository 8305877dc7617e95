"""Inject each fault of the fault matrix once into a tiny job and print what happened, as a markdown table.

    PYTHONPATH=QuantumGravPy/src .venv/bin/python benchmarks/fault_tolerance/fault_matrix.py [--folder DIR] [--out FILE.json]

The job is the test suite's tiny config (``QuantumGravPy/tests/conftest.py``: 90 causal sets, 3 epochs,
CPU); the faults are injected as in ``tests/test_fault_tolerance.py``, whose helpers this reuses. The
"observed" column is built from what each run did: exit codes, the error line, the checkpoints that load.
``--out`` also stores the rows with the command, date and load average (``benchmarks/fault_tolerance/results_fault_matrix.json``:
the run that docs/distributed_training.md shows).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # study_results.py: the results file of every study
TESTS = REPO / "QuantumGravPy" / "tests"
sys.path.insert(0, str(TESTS))  # the tests' tiny config and importable fault helpers

import torch  # noqa: E402

import QuantumGrav as QG  # noqa: E402
from QuantumGrav.config.yaml_io import resolve_pyobject  # noqa: E402
from conftest import TINY  # noqa: E402
from test_fault_tolerance import ENV, cli, epochs, limit_file_size, resume_args  # noqa: E402


def error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    traceback = " (with a traceback)" if "Traceback" in done.stderr else ""
    return (lines[-1].split("error: ", 1)[-1][:200] + "…" if lines else "no error line") + traceback


def loadable(path: Path) -> str:
    try:
        return f"{path.name} loads (epoch {torch.load(path, weights_only=True)['epoch']})"
    except Exception as err:  # noqa: BLE001 - reported as observed
        return f"{path.name}: {type(err).__name__}"


class Faults:
    def __init__(self, folder: Path):
        self.folder = folder
        self.config = QG.apply_overrides(TINY, {"training.path": str(folder / "runs"),
                                                "data.root": str(folder / "data")})
        self.config_file = folder / "tiny.yaml"
        self.config_file.write_text(QG.dump_config(self.config))
        done = cli("train", "--config", str(self.config_file), "--set", "training.num_epochs=2",
                   "--set", "training.run_name=base")
        assert done.returncode == 0, done.stderr
        self.base = folder / "runs" / "base"  # last.pt: epoch 1, previous.pt: epoch 0

    def copy(self, name: str) -> Path:
        return Path(shutil.copytree(self.base, self.folder / name))

    def kill_while_saving(self) -> str:
        marker = self.folder / "paused"
        job = subprocess.Popen([sys.executable, str(TESTS / "pause_before_last_checkpoint.py"), str(marker), "train",
                                "--config", str(self.config_file), "--set", "training.run_name=killed"], cwd=REPO,
                               env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not marker.exists() and job.poll() is None:
            time.sleep(0.2)
        job.kill()
        job.wait()
        run_dir = self.folder / "runs" / "killed"
        files = [loadable(p) for p in sorted((run_dir / "checkpoints").glob("*.pt"))]
        done = cli(*resume_args(run_dir))
        took_over = "stale lock taken over, " if "taking over the lock" in done.stderr else ""
        return (f"{', '.join(files)}; resume: {took_over}exit {done.returncode}, metrics.csv epochs "
                f"{epochs(run_dir)}")

    def truncated_last(self) -> str:
        run_dir = self.copy("truncated")
        last = run_dir / "checkpoints" / "last.pt"
        last.write_bytes(last.read_bytes()[:1000])
        done = cli(*resume_args(run_dir))
        warned = [line.split("WARNING ", 1)[-1] for line in done.stderr.splitlines() if "falling back" in line]
        return f"exit {done.returncode}; warning: {warned[0][:200] + '…' if warned else 'none'}"

    def corrupt_without_previous(self) -> str:
        run_dir = self.copy("corrupt")
        (run_dir / "checkpoints" / "last.pt").write_bytes(os.urandom(4000))
        (run_dir / "checkpoints" / "previous.pt").unlink()
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        done = cli(*resume_args(run_dir))
        same = before == {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        return f"exit {done.returncode}: {error_line(done)}; run directory {'unchanged' if same else 'CHANGED'}"

    def disk_full(self) -> str:
        run_dir = self.copy("disk_full")
        limit = (run_dir / "checkpoints" / "last.pt").stat().st_size // 2
        before = {p.name: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()}
        done = cli(*resume_args(run_dir), preexec_fn=limit_file_size(limit))
        intact = before == {p.name: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()}
        return f"exit {done.returncode}: {error_line(done)}; checkpoints {'intact' if intact else 'CHANGED'}"

    def second_job(self) -> str:
        run_dir = self.copy("locked")
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (run_dir / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid,
                                                   "job_token": None, "started": "2026-01-02T03:04:05"}))
        try:
            done = cli(*resume_args(run_dir))
        finally:
            other.kill()
            other.wait()
        return f"exit {done.returncode}: {error_line(done)}"

    def _launch_failing(self, criterion: str) -> str:
        config = QG.load_config(self.config, {"criterion": resolve_pyobject(criterion), "parallel.timeout_s": 5,
                                              "training.num_epochs": 5})
        started = time.monotonic()
        try:
            QG.launch(config, nproc=2)
        except QG.TrainingFailed as err:
            return f"ended {time.monotonic() - started:.0f} s after the start (start-up included): {str(err)[:170]}…"
        return "the job succeeded"

    def rank_raises(self) -> str:
        return self._launch_failing("ddp_helpers.loss_failing_on_rank_1")

    def rank_stalls(self) -> str:
        return self._launch_failing("ddp_helpers.loss_stalling_on_rank_1")


ROWS = [
    ("`kill -9` of rank 0 while it writes a checkpoint (paused before the rename onto last.pt)",
     "a checkpoint loads with weights_only=True; `--resume` finishes, every epoch once", "kill_while_saving"),
    ("a truncated last.pt, previous.pt present", "resume falls back to previous.pt with a warning",
     "truncated_last"),
    ("a random-bytes last.pt, no previous.pt", "exit 2 naming each file, no traceback, nothing changed",
     "corrupt_without_previous"),
    ("disk full while saving (RLIMIT_FSIZE)", "one error naming the path, exit 2, checkpoints intact", "disk_full"),
    ("a second job on the same run directory", "refused naming host, pid, start and the lock file", "second_job"),
    ("one rank raises (world size 2)", "the job ends with that rank's error", "rank_raises"),
    ("one rank stalls (world size 2, parallel.timeout_s=5)", "fails naming the rank that did not arrive",
     "rank_stalls"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=None, help="a new work folder (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=None, help="also store the rows here as JSON")
    args = parser.parse_args()
    load_before = os.getloadavg()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="fault_matrix_"))
    folder.mkdir(parents=True, exist_ok=True)
    faults = Faults(folder)
    lines, rows = ["| fault | expected | observed |", "|---|---|---|"], []
    for fault, expected, method in ROWS:
        observed = getattr(faults, method)().replace(str(folder), "$TMP").replace("|", "\\|")
        rows.append({"fault": fault, "expected": expected, "method": method, "observed": observed})
        lines.append(f"| {fault} | {expected} | {observed} |")
        print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    if args.out:
        import study_results  # benchmarks/study_results.py: written whole or not at all

        study_results.write_json(args.out, {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "machine": {"cpus": os.cpu_count(), "load_average_before": load_before,
                        "load_average_after": os.getloadavg(), "platform": platform.platform(),
                        "torch": torch.__version__},
            "rows": rows}, indent=1)


if __name__ == "__main__":
    main()
