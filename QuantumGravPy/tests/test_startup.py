"""Importing QuantumGrav pauses the garbage collector and freezes the start-up state (QuantumGrav/__init__.py;
benchmarks/startup/bench_startup.py measures what it saves): the collector is left as the caller had it, even when the
import fails, and what the program makes afterwards is collected as usual."""

import gc
import subprocess
import sys
import weakref

import QuantumGrav  # noqa: F401  (this process's import is the one under test in the first two tests)


class Node:
    def __init__(self):
        self.partner = None


def test_after_the_import_the_collector_runs_and_the_start_up_state_is_frozen():
    assert gc.isenabled()
    assert gc.get_freeze_count() > 100_000, "torch's and PyG's objects are in the permanent generation"


def test_a_cycle_made_after_the_import_is_collected():
    first, second = Node(), Node()
    first.partner, second.partner = second, first
    alive = weakref.ref(first)
    del first, second
    gc.collect()
    assert alive() is None


FRESH_PROCESS = """
import gc, sys
sys.modules["QuantumGrav.train_ddp"] = None  # makes the package's import fail half-way
try:
    import QuantumGrav
except ImportError:
    pass
after_failure = (gc.isenabled(), gc.get_freeze_count())
del sys.modules["QuantumGrav.train_ddp"]
gc.disable()
import QuantumGrav
print(after_failure, gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_the_callers_collector_setting_is_kept_and_a_failed_import_freezes_nothing():
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "(True, 0) False True", done.stdout
