"""Notebook 03's first DDP script runs unchanged under torchrun on 2 processes and as a plain one-process script.

The script keeps its data and checkpoint next to itself, so it runs from a copy in tmp_path (never the repository's
notebooks/_data); the library comes from the checkout these tests import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import QuantumGrav as QG

pytestmark = pytest.mark.full_suite  # each run starts fresh interpreters and generates its data: about 20 s

SCRIPT = Path(__file__).resolve().parents[2] / "notebooks" / "first_ddp.py"
LAUNCHERS = {
    "torchrun": lambda: [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                         f"--master_port={QG.find_free_port()}"],
    "python": lambda: [sys.executable],
}


@pytest.mark.parametrize(("launcher", "world_size"), [("torchrun", 2), ("python", 1)])
def test_first_ddp_script_ends_with_the_same_weights_on_every_rank(tmp_path, launcher, world_size):
    script = shutil.copy(SCRIPT, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(QG.__file__).parents[1]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(LAUNCHERS[launcher]() + [script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert f"same weights on every rank: True (world size {world_size})" in done.stdout, done.stdout
    assert done.stdout.count("epoch 2: loss of each rank's last batch") == 1, "rank 0 alone prints"
    assert (tmp_path / "_runs" / "first_ddp.pt").exists()
