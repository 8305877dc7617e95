"""The library's process pools (data generation, ``map_in_workers``) run one thread per worker: each worker is one
core's worth of work, and a worker that starts a thread per core of the machine makes a pool of W workers run
W x cores threads (a load average of up to 141 on a 16-core GPU node with 12 generation workers). Checked in a
fresh process whose own pools run 2 threads (as a user's script runs on any machine of 2 cores or more), not under
the suite's OMP_NUM_THREADS=1 (conftest.py)."""

import json
import os
import subprocess
import sys
import textwrap

from conftest import REPO

SCRIPT = textwrap.dedent("""
    import json
    import torch
    from threadpoolctl import threadpool_info
    from QuantumGrav.common.processes import map_in_workers

    def threads_here(_):
        return torch.get_num_threads(), [pool["num_threads"] for pool in threadpool_info()]

    if __name__ == "__main__":
        print(json.dumps({"parent": threads_here(0),
                          "workers": map_in_workers(threads_here, [(0,), (1,)], 2, caller="the test")}))
""")


def test_each_worker_of_a_pool_runs_one_thread_for_torch_and_blas(tmp_path):
    script = tmp_path / "pool_threads.py"
    script.write_text(SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.endswith("_NUM_THREADS")}  # OMP, OPENBLAS, MKL
    env["OMP_NUM_THREADS"] = "2"  # what torch and the BLAS pools take on a 2-core machine, set so on any machine
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "QuantumGravPy" / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    threads = json.loads(done.stdout.strip().splitlines()[-1])
    parent_torch, parent_pools = threads["parent"]
    assert parent_torch > 1 and max(parent_pools) > 1, f"the script's own process runs one thread: {threads}"
    for worker_torch, worker_pools in threads["workers"]:
        assert worker_torch == 1, threads
        assert worker_pools and set(worker_pools) == {1}, threads
