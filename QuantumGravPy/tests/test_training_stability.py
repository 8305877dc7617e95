"""Training that neither slows down nor lies at validation: denormal floats flushed in every thread of every
process that trains, and batch norm statistics recomputed over the training set before each validation."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch_geometric.data import Data
from torch import nn

import QuantumGrav as QG
from QuantumGrav.distributed.runtime import Runtime
from QuantumGrav.training.batch_norm import batch_norms, recompute_batch_norm_statistics

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


class TwoNormModel(nn.Module):
    """Linear -> batch norm -> ReLU -> dropout -> linear -> batch norm, on each batch's x."""

    def __init__(self):
        super().__init__()
        self.first, self.norm1 = nn.Linear(3, 4), nn.BatchNorm1d(4)
        self.dropout = nn.Dropout(0.5)
        self.second, self.norm2 = nn.Linear(4, 2), nn.BatchNorm1d(2)

    def forward(self, batch):
        return self.norm2(self.second(self.dropout(torch.relu(self.norm1(self.first(batch.x))))))


def batches(seed: int, count: int = 6) -> list:
    generator = torch.Generator().manual_seed(seed)
    return [Data(x=torch.randn(5 + i, 3, generator=generator) * 3 + 1) for i in range(count)]


def test_recomputed_statistics_are_those_of_the_whole_training_set():
    torch.manual_seed(0)
    model, data = TwoNormModel(), batches(seed=1)
    model.train()
    for batch in data:  # the running averages of a few training batches
        model(batch)
    recompute_batch_norm_statistics(model, data, torch.device("cpu"), Runtime(), lambda: torch.autocast("cpu",
                                                                                                        enabled=False))
    inputs = model.first(torch.cat([b.x for b in data])).detach()
    torch.testing.assert_close(model.norm1.running_mean, inputs.mean(0))
    torch.testing.assert_close(model.norm1.running_var, inputs.var(0, unbiased=True))
    # The second norm sees the first one's output normalised per batch (as in training), without dropout.
    second = []
    for b in data:
        h = model.first(b.x)
        h = (h - h.mean(0)) / torch.sqrt(h.var(0, unbiased=False) + model.norm1.eps)
        second.append(model.second(torch.relu(h * model.norm1.weight + model.norm1.bias)).detach())
    torch.testing.assert_close(model.norm2.running_var, torch.cat(second).var(0, unbiased=True))
    assert model.training and model.dropout.training  # the modes are restored
    assert int(model.norm1.num_batches_tracked) == len(data)  # the pass is not training


def test_a_pass_over_some_sets_reads_the_first_batches_up_to_that_many_sets():
    """``sets``: whole batches from the start until at least that many sets are read (here 5 + 6 + 7 items,
    a set each: 12 sets need the first two batches and one more), then the statistics of exactly those."""
    torch.manual_seed(0)
    data = [Data(x=b.x, num_graphs=len(b.x)) for b in batches(seed=1)]
    model, reference = TwoNormModel(), TwoNormModel()
    reference.load_state_dict(model.state_dict())
    off = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    recompute_batch_norm_statistics(model, data, torch.device("cpu"), Runtime(), off, sets=12)
    recompute_batch_norm_statistics(reference, data[:3], torch.device("cpu"), Runtime(), off)
    for got, want in zip(batch_norms(model), batch_norms(reference)):
        torch.testing.assert_close(got.running_var, want.running_var)
        torch.testing.assert_close(got.running_mean, want.running_mean)
    recompute_batch_norm_statistics(reference, data, torch.device("cpu"), Runtime(), off)
    assert not torch.allclose(model.norm1.running_var, reference.norm1.running_var)  # not the whole set's


def recompute_on_a_shard(rank: int, world_size: int, port: int, results) -> None:
    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo")
    try:
        torch.manual_seed(0)
        model = TwoNormModel()
        shard = batches(seed=1)[rank::world_size]
        recompute_batch_norm_statistics(model, shard, torch.device("cpu"), Runtime(rank=rank, world_size=world_size),
                                        lambda: torch.autocast("cpu", enabled=False))
        results.put((rank, [b.tolist() for n in batch_norms(model) for b in (n.running_mean, n.running_var)]))
    finally:
        QG.cleanup_ddp()


def test_two_ranks_recompute_the_statistics_of_their_shards_together():
    torch.manual_seed(0)
    model = TwoNormModel()
    recompute_batch_norm_statistics(model, batches(seed=1), torch.device("cpu"), Runtime(),
                                    lambda: torch.autocast("cpu", enabled=False))
    one_process = [b.tolist() for n in batch_norms(model) for b in (n.running_mean, n.running_var)]
    ranks = dict(ddp_helpers.spawn_ranks(recompute_on_a_shard, 2))
    for rank in (0, 1):
        for got, want in zip(ranks[rank], one_process):
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("recompute", [True, False])
def test_the_best_checkpoint_holds_the_training_sets_statistics(tiny_config, recompute):
    """With recompute_batch_norm the weights that validation and the test see carry the statistics of the
    whole training set at those weights; without, the running averages of the last batches."""
    config = tiny_config({"training.num_epochs": 2, "validation.recompute_batch_norm": recompute})
    trainer = QG.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    running = [n.running_var.clone() for n in batch_norms(trainer.core_model)]
    recompute_batch_norm_statistics(trainer.core_model, train_loader, torch.device("cpu"), Runtime(),
                                    lambda: torch.autocast("cpu", enabled=False))
    exact = [n.running_var for n in batch_norms(trainer.core_model)]
    same = all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(running, exact))
    assert same == recompute


def test_the_pass_reads_the_configured_number_of_training_sets(tiny_config):
    """``validation.recompute_batch_norm_sets``: the statistics validation sees are those of the first batches
    of the epoch's training order up to that many sets, not the whole training set's."""
    config = tiny_config({"training.num_epochs": 2, "training.batch_size": 4,
                          "validation.recompute_batch_norm_sets": 6})
    trainer = QG.Trainer(config)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    trainer.close()
    assert len(trainer.split["train"]) > 8  # more than the pass reads
    got = [n.running_var.clone() for n in batch_norms(trainer.core_model)]
    off = lambda: torch.autocast("cpu", enabled=False)  # noqa: E731
    first = [batch for _, batch in zip(range(2), train_loader)]  # the last epoch's order: 2 batches of 4 >= 6
    recompute_batch_norm_statistics(trainer.core_model, first, torch.device("cpu"), Runtime(), off)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(got, (n.running_var for n in
                                                                                 batch_norms(trainer.core_model))))
    recompute_batch_norm_statistics(trainer.core_model, train_loader, torch.device("cpu"), Runtime(), off)
    assert not all(torch.allclose(a, n.running_var, rtol=1e-5, atol=1e-7)
                   for a, n in zip(got, batch_norms(trainer.core_model)))
