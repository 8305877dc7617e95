"""``python pause_before_last_checkpoint.py MARKER ARGS...`` runs ``python -m QuantumGrav ARGS...``, except
that the rename which puts a new checkpoint in place as ``last.pt`` (once a previous one exists) writes
MARKER and sleeps instead: the moment at which test_fault_tolerance kills the job with ``kill -9``."""

import os
import runpy
import sys
import time
from pathlib import Path

marker = Path(sys.argv[1])
_replace = os.replace


def _pausing_replace(source, target, *args, **kwargs):
    target_path = Path(target)
    if target_path.name == "last.pt" and (target_path.parent / "previous.pt").exists():
        marker.write_text(str(os.getpid()))
        time.sleep(600)  # killed here
    return _replace(source, target, *args, **kwargs)


os.replace = _pausing_replace
sys.argv = ["python -m QuantumGrav", *sys.argv[2:]]
runpy.run_module("QuantumGrav", run_name="__main__", alter_sys=True)
