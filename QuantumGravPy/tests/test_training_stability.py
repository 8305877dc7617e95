"""Training that does not slow down: denormal floats flushed in every thread of every process that trains."""

import os
import subprocess
import sys
import textwrap

import QuantumGrav as QG

import ddp_helpers

# A product that underflows to a denormal float32 (1e-40), split over every thread of torch's pool: its
# nonzero count is 0 only when every thread flushes.
POOL_KEEPS_DENORMALS = ("int((torch.full((1 << 18,), 1e-20) * torch.full((1 << 18,), 1e-20)).count_nonzero())")


def written(config: dict, tmp_path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(QG.dump_config(config))
    return str(path)


def test_a_trainer_flushes_denormals_in_every_thread_of_a_pool_started_before_it(tiny_config, tmp_path):
    """A notebook kernel or script that computed with torch first has a thread pool whose threads do not
    inherit a flag set later; the trainer must reach them too."""
    config = written(tiny_config({"training.num_epochs": 1}), tmp_path)
    script = textwrap.dedent(f"""
        import torch, QuantumGrav as QG
        torch.set_num_threads(2)
        before = {POOL_KEEPS_DENORMALS}   # starts the pool; nothing is flushed yet
        trainer = QG.Trainer({config!r})
        print(before, {POOL_KEEPS_DENORMALS})
        trainer.close()
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split()[-2:])
    assert before == 1 << 18 and after == 0


def test_flush_denormals_false_keeps_ieee_arithmetic(tiny_config, tmp_path):
    config = written(tiny_config({"training.flush_denormals": False}), tmp_path)
    script = textwrap.dedent(f"""
        import torch, QuantumGrav as QG
        trainer = QG.Trainer({config!r})
        print({POOL_KEEPS_DENORMALS})
        trainer.close()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) == 1 << 18


def test_every_launched_worker_trains_with_denormals_flushed(tiny_config, tmp_path):
    result = QG.launch(tiny_config({"training.num_epochs": 1}), nproc=2,
                       callbacks=[ddp_helpers.RecordDenormalFlush(str(tmp_path))])
    assert result["summary"]["world_size"] == 2
    assert sorted(p.read_text() for p in tmp_path.glob("flush_rank*.txt")) == ["0", "0"]
