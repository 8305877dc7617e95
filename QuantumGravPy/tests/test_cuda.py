"""The GPU paths, where a CUDA GPU is: the default layer on CUDA, mixed precision, NCCL with each process on
cuda:LOCAL_RANK, under the library's trainer, torchrun and the seeds' own script.

Skipped without a CUDA GPU (CI has none); on a machine with one: ``pytest QuantumGravPy/tests/test_cuda.py``.
One GPU is enough: NCCL refuses two ranks on one GPU, so the distributed tests run one rank per GPU present.
"""

import copy
import csv
import math
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import yaml

import QuantumGrav as QG
from QuantumGrav.common.errors import UserError
from QuantumGrav.models.sparse_attention import Adjacency
from conftest import REPO
from test_sparse_attention import TOL, bidirectional_pair, graphs_of_different_sizes, outputs_and_gradients, pair

sys.path.insert(0, str(REPO / "benchmarks" / "fault_tolerance"))
import stress_teardown  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda", 0)
# configs/train.yaml's model: the default layer (SparseTransformerConv, both directions, invariants in the head).
DEFAULT_MODEL = yaml.load((REPO / "configs" / "train.yaml").read_text(), QG.get_loader())["model"]


def on(device: torch.device, layer, batch, structure=None):
    """``outputs_and_gradients`` of copies of ``layer`` and ``batch`` on ``device``, in float32 on the CPU (the
    parameters that get no gradient left out)."""
    out, grads = outputs_and_gradients(copy.deepcopy(layer).to(device), batch.clone().to(device), structure=structure)
    return out.float().cpu(), {name: grad.float().cpu() for name, grad in grads.items() if grad is not None}


def assert_close(ours, theirs, **tolerance) -> None:
    (out_ours, grads_ours), (out_theirs, grads_theirs) = ours, theirs
    torch.testing.assert_close(out_ours, out_theirs, **tolerance)
    assert grads_ours.keys() == grads_theirs.keys()
    for name, grad in grads_theirs.items():
        torch.testing.assert_close(grads_ours[name], grad, **tolerance, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("heads, concat", [(1, True), (3, True), (2, False)])
def test_the_sparse_layer_on_cuda_equals_pygs_on_cuda_and_itself_on_the_cpu(heads, concat):
    theirs, ours = pair({"heads": heads, "concat": concat})
    batch = graphs_of_different_sizes()  # isolated nodes and a graph without edges included
    on_cuda = on(CUDA, ours, batch)
    assert_close(on_cuda, on(CUDA, theirs, batch), **TOL)
    assert_close(on_cuda, on(torch.device("cpu"), ours, batch), **TOL)


def test_both_directions_on_cuda_equal_pygs_with_a_shared_adjacency():
    theirs, ours = bidirectional_pair()
    batch = graphs_of_different_sizes()
    adjacency = Adjacency.from_edge_index(batch.edge_index.to(CUDA), batch.num_nodes)
    assert_close(on(CUDA, ours, batch, adjacency), on(CUDA, theirs, batch), **TOL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_mixed_precision_on_cuda_stays_close_to_float32(dtype):
    theirs, ours = pair({"heads": 2, "concat": False})
    batch = graphs_of_different_sizes()
    reference, _ = on(CUDA, theirs, batch)
    with torch.autocast("cuda", dtype=dtype):
        out, grads = on(CUDA, ours, batch)
    torch.testing.assert_close(out, reference, rtol=0.05, atol=0.05)
    assert all(torch.isfinite(grad).all() for grad in grads.values())


def _metrics(trainer) -> list[dict[str, float]]:
    with open(trainer.run_dir / "metrics.csv", newline="") as f:
        return [{key: float(value) for key, value in row.items() if value not in ("", None)} for row in csv.DictReader(f)]


@pytest.mark.parametrize("amp", ["off", "bf16", "fp16"])
def test_the_default_model_trains_on_cuda(tiny_config, amp):
    config = tiny_config({"model": DEFAULT_MODEL, "model.dropout": 0.0, "training.device": "auto",
                          "training.amp": amp, "training.num_epochs": 2})
    trainer = QG.Trainer(config)
    try:
        assert trainer.device == CUDA and all(p.device == CUDA for p in trainer.core_model.parameters())
        assert (trainer.optimization.scaler is not None) == (amp == "fp16"), "a gradient scaler for fp16 only"
        train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
        trainer.run_training(train_loader, val_loader)
        result = trainer.run_test(test_loader)
    finally:
        trainer.close()
    rows = _metrics(trainer)
    assert len(rows) == 2 and all(math.isfinite(row[key]) for row in rows for key in ("train_loss", "val_loss"))
    assert all(row["cuda_peak_mb"] > 0 for row in rows), "the memory columns read the GPU"
    assert result["num_test"] > 0 and math.isfinite(result["test_loss"])
    if amp == "off":  # the same seed on the CPU: the same first epoch, up to the order of CUDA's atomic sums
        on_cpu = QG.Trainer(QG.load_config(config, {"training.device": "cpu", "training.run_name": "cpu"}))
        try:
            on_cpu.run_training(*on_cpu.prepare_dataloaders()[:2])
        finally:
            on_cpu.close()
        for key in ("train_loss", "val_loss"):
            assert rows[0][key] == pytest.approx(_metrics(on_cpu)[0][key], rel=1e-3), key


@pytest.fixture
def one_rank_per_gpu(monkeypatch):
    for variable in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):  # initialize_ddp exports them: undone after
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    QG.initialize_ddp(0, 1, master_port=QG.find_free_port())  # no backend named: NCCL, since CUDA is here
    yield
    QG.cleanup_ddp()


def test_a_ddp_trainer_uses_nccl_and_the_gpu_of_its_local_rank(tiny_config, one_rank_per_gpu):
    assert dist.get_backend() == "nccl"
    trainer = QG.TrainerDDP(rank=0, config=tiny_config({"training.device": "auto", "training.amp": "bf16",
                                                        "training.num_epochs": 2}))
    assert trainer.device == CUDA and trainer.model.device_ids == [0]
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    assert [row["epoch"] for row in trainer.history] == [0, 1]
    assert trainer.run_test(test_loader)["num_test"] > 0


def test_torchrun_runs_the_standalone_example_on_nccl_with_mixed_precision(tiny_config, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(QG.dump_config(tiny_config({"training.device": "auto", "training.amp": "bf16",
                                               "training.run_name": "gpu", "training.num_epochs": 2})))
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc_per_node={torch.cuda.device_count()}",
                           str(REPO / "QuantumGravPy" / "examples" / "train_ddp_standalone.py"), "--config", str(job)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    log = (tmp_path / "runs" / "gpu" / "logs" / "rank_0.log").read_text()
    assert f"world_size={torch.cuda.device_count()}  backend=nccl  device=cuda:0" in log, log[-3000:]
    assert "amp=bf16" in log


def test_the_seeds_torchrun_script_trains_on_nccl_and_exits(tmp_path):
    project = stress_teardown.UserProject(tmp_path, overrides={"training.device": "auto"})
    (outcome,) = stress_teardown.stress("torchrun", torch.cuda.device_count(), 1, project, hang_after_s=60.0,
                                        limit_s=240.0)
    assert outcome.exit_code == 0, outcome.output[-3000:]
    assert "backend=nccl  device=cuda:0" in outcome.output, outcome.output[-3000:]


def test_more_processes_than_gpus_is_refused_before_any_starts(tiny_config):
    nproc = torch.cuda.device_count() + 1
    with pytest.raises(UserError, match=r"GPU"):
        QG.launch(tiny_config({"training.device": "cuda"}), nproc=nproc)
