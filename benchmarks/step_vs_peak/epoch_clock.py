"""A callback that records, on rank 0, each epoch's wall and CPU seconds (the process's CPU: every thread's), for
bench_epoch_before_after.py: its workers import it by name (on PYTHONPATH beside either tree's QuantumGrav)."""

import json
import time

import QuantumGrav as QG


class EpochClock(QG.Callback):
    def __init__(self, path: str):
        self.path = path

    def on_fit_start(self, state) -> None:
        self.last = (time.perf_counter(), time.process_time())

    def on_epoch_end(self, state, record) -> None:
        if not state.runtime.is_main:
            return
        now = (time.perf_counter(), time.process_time())
        with open(self.path, "a") as f:
            f.write(json.dumps({"epoch": record["epoch"], "wall_s": now[0] - self.last[0],
                                "cpu_s": now[1] - self.last[1], "epoch_time_s": record["epoch_time_s"],
                                "graphs_per_s": record["graphs_per_s"]}) + "\n")
        self.last = now
