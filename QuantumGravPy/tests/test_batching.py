"""Batches by size (training.batch_budget) and the memory preflight (training.preflight): the sampler's
properties at world sizes 1-3, its use in training (one process and gloo DDP), the refusal of an oversized batch."""

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.sections.loaders import BatchBudgetSection, TrainingLoaderSection
from QuantumGrav.data.batching import (BatchBudget, DistributedBudgetBatchSampler, ShardedBudgetBatches, graph_sizes,
                                       pack_by_size)
from QuantumGrav.training.loaders import training_batches
from QuantumGrav.distributed.runtime import Runtime
from QuantumGrav.training.optimization import batches_per_epoch
from QuantumGrav.training.preflight import MemoryEstimate
from conftest import TINY

EDGE_BUDGET = 400  # TINY's sets (16-24 elements) have 10-80 links: 5 to 25 sets per batch


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("budget")
    config = QG.apply_overrides(TINY, {"training.path": str(folder / "runs"), "training.num_epochs": 2,
                                       "data.root": str(folder / "data")})
    path = folder / "job.yaml"
    path.write_text(QG.dump_config(QG.load_config(config)))
    return path


def _sizes(count: int = 157, seed: int = 0) -> np.ndarray:
    """Sizes like sprinkled sets of 64 to 1,024 elements (links ~ N^1.3), nodes then edges."""
    rng = np.random.default_rng(seed)
    nodes = rng.integers(64, 1025, count)
    return np.stack([nodes, (nodes ** 1.3 * rng.uniform(0.8, 1.2, count)).astype(np.int64)], axis=1)


def _samplers(sizes, budget, world_size, seed=5, shuffle=True):
    return [DistributedBudgetBatchSampler(sizes, budget, rank, world_size, seed, shuffle) for rank in range(world_size)]


def _epoch(samplers, epoch):
    for sampler in samplers:
        sampler.set_epoch(epoch)
    return [list(sampler) for sampler in samplers]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_item_once_equal_steps_and_a_deterministic_plan_per_epoch(world_size):
    sizes, budget = _sizes(), BatchBudget(edges=20_000)
    samplers = _samplers(sizes, budget, world_size)
    epoch_1 = _epoch(samplers, 1)
    assert len({len(batches) for batches in epoch_1}) == 1, "every rank runs the same number of steps"
    assert all(len(batches) == len(sampler) for batches, sampler in zip(epoch_1, samplers))
    seen = [item for batches in epoch_1 for batch in batches for item in batch]
    assert set(seen) == set(range(len(sizes))), "every item is in a batch"
    batches = samplers[0].batches
    duplicated = len(seen) - len(sizes)
    padding = len(samplers[0]) * world_size - len(batches)
    assert padding < world_size and duplicated == sum(len(b) for b in samplers[0].padded[len(batches):])
    for batch in batches:  # within the budget
        assert sizes[batch, 1].sum() <= budget.edges
    assert _epoch(_samplers(sizes, budget, world_size), 1) == epoch_1, "a function of (seed, epoch) only"
    if len(samplers[0]) > 1:
        assert _epoch(samplers, 2) != epoch_1, "another epoch, another order"


@pytest.mark.parametrize("world_size", [2, 3])
def test_each_steps_batches_hold_about_the_same_edges(world_size):
    """The stated bound: at every step but the last (which holds the packing's partial batch and the padding),
    the ranks' batches differ by at most the edges of the largest single set; the epoch's totals per rank by at
    most the edges of one batch (the budget)."""
    sizes, budget = _sizes(400), BatchBudget(edges=20_000)
    samplers = _samplers(sizes, budget, world_size, shuffle=False)  # in order: the last step is the partial one
    plan = samplers[0].plan(0)
    largest_set = sizes[:, 1].max()
    for step in plan[:-1]:
        edges = [sizes[batch, 1].sum() for batch in step]
        assert max(edges) - min(edges) <= largest_set, edges
    totals = [sum(sizes[step[rank], 1].sum() for step in plan) for rank in range(world_size)]
    assert max(totals) - min(totals) <= budget.edges
    shuffled = _samplers(sizes, budget, world_size)[0].plan(3)
    totals = [sum(sizes[step[rank], 1].sum() for step in shuffled) for rank in range(world_size)]
    assert max(totals) - min(totals) <= budget.edges


def test_fixed_count_batches_are_far_less_balanced_than_the_budget():
    """Why the budget exists: the same data in batches of a fixed count put very different work at one step."""
    sizes = _sizes(400)
    order = np.random.default_rng(0).permutation(len(sizes))
    fixed = [sizes[order[i:i + 8], 1].sum() for i in range(0, 400, 8)]
    fixed_spread = max(abs(a - b) for a, b in zip(fixed[0::2], fixed[1::2]))
    plan = _samplers(sizes, BatchBudget(edges=int(np.mean(fixed))), 2)[0].plan(0)
    budget_spread = max(abs(sizes[a, 1].sum() - sizes[b, 1].sum()) for a, b in plan[:-1])
    assert budget_spread * 3 < fixed_spread


def test_equal_steps_and_full_coverage_hold_over_many_random_data_sets_and_world_sizes():
    """The hang this prevents needs only one rank with one step fewer: checked over 300 random cases."""
    rng = np.random.default_rng(11)
    for case in range(300):
        sizes = _sizes(int(rng.integers(1, 60)), seed=case)
        budget = BatchBudget(edges=int(sizes[:, 1].max() * rng.uniform(1, 4)),
                             graphs=int(rng.integers(1, 9)) if case % 2 else None)
        world_size = int(rng.integers(1, 5))
        batches = _epoch(_samplers(sizes, budget, world_size, seed=case), int(rng.integers(0, 100)))
        assert len({len(b) for b in batches}) == 1, (case, [len(b) for b in batches])
        assert {i for rank in batches for batch in rank for i in batch} == set(range(len(sizes))), case


def test_more_ranks_than_batches_still_gives_every_rank_a_batch():
    sizes = np.array([[10, 50], [12, 60]])
    samplers = _samplers(sizes, BatchBudget(edges=1000), 3)
    assert [len(list(s)) for s in samplers] == [1, 1, 1]


def test_packing_bounds_nodes_edges_and_graphs_and_groups_similar_sizes():
    sizes = _sizes(300)
    budget = BatchBudget(nodes=3000, edges=15_000, graphs=6)
    batches = pack_by_size(sizes, budget, seed=1)
    assert sorted(np.concatenate(batches).tolist()) == list(range(300))
    for batch in batches:
        assert sizes[batch, 0].sum() <= 3000 and sizes[batch, 1].sum() <= 15_000 and len(batch) <= 6
    sizes_of = [sizes[batch, 1] for batch in batches]
    assert all(a.max() <= b.min() for a, b in zip(sizes_of, sizes_of[1:])), "sorted by size, then packed"


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_evaluation_batches_hold_every_item_exactly_once_without_padding(world_size):
    sizes = _sizes(50)
    seen = [i for rank in range(world_size)
            for batch in ShardedBudgetBatches(sizes, BatchBudget(edges=9000), rank, world_size) for i in batch]
    assert sorted(seen) == list(range(50))


def test_sizes_come_from_the_generators_index_and_equal_the_items(tiny_config):
    config = tiny_config()
    memory = QG.CausalSetDataset.from_config(config["data"])
    disk = QG.CausalSetDataset.from_config({**config["data"], "storage": "disk"})
    expected = np.array([[d.num_nodes, d.edge_index.size(1)] for d in memory])
    assert np.array_equal(memory.graph_sizes(), expected)
    assert np.array_equal(disk.graph_sizes(), expected)
    assert np.array_equal(memory.index_select([5, 2]).graph_sizes(), expected[[5, 2]])
    items = [memory[i] for i in range(len(memory))]  # a plain list: every item read once
    assert np.array_equal(graph_sizes(items, Runtime()), expected)


def test_an_item_larger_than_the_budget_is_refused_with_the_budget_that_fits(tiny_config):
    with pytest.raises(QG.ConfigError, match=r"training.batch_budget: .* raise the budget to at least nodes: 24, "):
        QG.Trainer(tiny_config({"training.batch_budget": {"nodes": 20}}))


def test_a_budget_without_nodes_or_edges_or_with_drop_last_or_lr_scaling_is_a_config_error(tiny_config):
    with pytest.raises(QG.ConfigError, match="training.batch_budget: expected nodes, edges or both"):
        tiny_config({"training.batch_budget": {"graphs": 4}})
    with pytest.raises(QG.ConfigError, match="training.drop_last: batches packed by training.batch_budget"):
        tiny_config({"training.batch_budget": {"edges": 100}, "training.drop_last": True})
    with pytest.raises(QG.ConfigError, match="training.lr_scaling: 'linear' scales the LR with the effective batch"):
        tiny_config({"training.batch_budget": {"edges": 100}, "training.lr_scaling": "linear"})


def test_the_training_batches_and_their_count_need_only_the_training_section(tiny_config):
    """The batch plan reads the training loader's section and the seed alone, so it is handed those and not the
    whole config."""
    training = tiny_config({"training.batch_budget": {"edges": EDGE_BUDGET}}).sections.loaders.training
    sizes = {name: _sizes(count, seed) for name, count, seed in (("train", 40, 1), ("val", 10, 2), ("test", 10, 3))}
    sizes = {name: np.minimum(s, [EDGE_BUDGET, EDGE_BUDGET]) for name, s in sizes.items()}
    batches = training_batches(sizes, training, 7, Runtime())
    assert sorted(i for batch in batches for i in batch) == list(range(40))
    assert training_batches(sizes, replace(training, batch_budget=None), 7, Runtime()) is None
    fixed = replace(training, batch_size=4, drop_last=False)
    assert batches_per_epoch(fixed, 10, 2) == 2 and batches_per_epoch(replace(fixed, drop_last=True), 10, 2) == 1

# --------------------------------------------------------------------------- training with a budget
def _train(config):
    trainer = QG.Trainer(config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    try:
        trainer.run_training(train_loader, val_loader)
    finally:
        trainer.close()
    return trainer, train_loader, val_loader


def test_one_process_trains_on_the_budgets_batches_and_validates_every_item_once(tiny_config):
    trainer, train_loader, val_loader = _train(tiny_config({"training.batch_budget": {"edges": EDGE_BUDGET},
                                                            "training.num_epochs": 2}))
    sampler = train_loader.batch_sampler
    assert isinstance(sampler, DistributedBudgetBatchSampler) and len(train_loader) == len(sampler.batches)
    assert sum(batch.num_graphs for batch in val_loader) == len(trainer.split["val"])
    for batch in train_loader:
        assert batch.edge_index.size(1) <= EDGE_BUDGET
    assert trainer.memory_estimate.edges == max(trainer.sizes["train"][b, 1].sum() for b in sampler.batches)


def test_a_run_with_a_budget_killed_mid_epoch_resumes_at_the_next_batch(tiny_config):
    import ddp_helpers
    from QuantumGrav.config.yaml_io import resolve_pyobject

    settings = {"training.num_epochs": 2, "training.checkpoint_every_n_steps": 1, "model.dropout": 0.3,
                "training.batch_budget": {"edges": EDGE_BUDGET}}
    reference, train_loader, val_loader = _train(tiny_config({**settings, "training.run_name": "reference"}))
    steps, val_batches = len(train_loader), len(val_loader)
    # 1 signature check + epoch 0's training and validation batches, then the 3rd batch of epoch 1
    ddp_helpers.interrupt.update(at_call=1 + steps + val_batches + 3, calls=0)
    killed = tiny_config({**settings, "training.run_name": "killed",
                          "criterion": resolve_pyobject("ddp_helpers.cross_entropy_interrupted")})
    with pytest.raises(KeyboardInterrupt):
        _train(killed)
    ddp_helpers.interrupt.update(at_call=None)
    run_dir = reference.run_dir.parent / "killed"
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["in_epoch"]["completed_batches"] == 2
    resumed, _, _ = _train(QG.apply_overrides(killed, {"training.resume": str(run_dir)}))
    assert resumed.history[1]["train_loss"] == pytest.approx(reference.history[1]["train_loss"], rel=1e-6)
    final = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    expected = torch.load(reference.run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    for name in expected:
        torch.testing.assert_close(final[name], expected[name], msg=name)


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_with_a_budget_runs_equal_steps_and_validation_equals_one_process(tiny_config, world_size):
    overrides = {"training.batch_budget": {"edges": EDGE_BUDGET}, "training.num_epochs": 2,
                 "data.num_samples": 100, "training.run_name": f"ddp{world_size}"}
    result = QG.launch(tiny_config(overrides), nproc=world_size)
    run_dir = Path(result["run_dir"])
    single = QG.Trainer(tiny_config({**overrides, "training.run_name": f"check{world_size}"}))
    single.core_model.load_state_dict(torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"])
    _, val_loader, _ = single.prepare_dataloaders()
    expected = single.evaluate(val_loader)
    single.close()
    assert expected["count"] == len(single.split["val"])
    assert result["history"][-1]["val_loss"] == pytest.approx(expected["loss"], rel=1e-5)
    assert result["history"][-1]["val_accuracy"] == pytest.approx(expected["accuracy"], abs=1e-9)
    log = (run_dir / "logs" / "rank_0.log").read_text()
    steps = len(DistributedBudgetBatchSampler(single.sizes["train"], BatchBudget(edges=EDGE_BUDGET), 0, world_size,
                                              7))
    assert f"{steps} steps per process and epoch" in log
    for rank in range(world_size):  # every rank finished both epochs: none waited for a missing batch
        assert "training finished at epoch 1" in (run_dir / "logs" / f"rank_{rank}.log").read_text()


def test_the_cli_trains_with_a_budget_on_two_processes(cli_in_process, config_file, tmp_path):
    result = cli_in_process("train", "--config", str(config_file), "--nproc", "2",
                            "--set", f"training.path={tmp_path / 'runs'}", "--set", "training.run_name=budget",
                            "--set", f"training.batch_budget.edges={EDGE_BUDGET}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "runs" / "budget" / "metrics.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) >= 1
    assert "batches by size" in (tmp_path / "runs" / "budget" / "logs" / "rank_0.log").read_text()


# --------------------------------------------------------------------------- the preflight
def test_the_preflight_refuses_an_oversized_batch_in_one_line_and_writes_nothing(cli_in_process, config_file,
                                                                                 tmp_path):
    runs = tmp_path / "runs"
    result = cli_in_process("train", "--config", str(config_file), "--set", f"training.path={runs}",
                            "--set", "training.memory_limit_mb=1", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: training.preflight: the largest training batch ("), lines
    assert "against a limit of 1 MB (training.memory_limit_mb)" in lines[0] and "Traceback" not in result.stderr
    assert not runs.exists() or not any(runs.iterdir())


def test_the_preflight_suggests_the_budget_or_batch_size_that_fits():
    measured = MemoryEstimate(graphs=8, nodes=4000, edges=40_000, peak_mb=1500, before_mb=500, limit_mb=1000,
                              limit_source="training.memory_limit_mb", measured="peak RSS", largest_set=(600, 6000))
    assert not measured.fits
    # the batch took 1,000 MB; 500 MB of room, 0.8 of it used: 0.4 x the batch
    assert "set training.batch_size to 12 " in measured.advice(TrainingLoaderSection(batch_size=32))
    assert "{nodes: 1600, edges: 16000}" in measured.advice(
        TrainingLoaderSection(batch_size=32, batch_budget=BatchBudgetSection(nodes=5000, edges=50_000)))
    assert "even one batch of the largest sets" in measured.advice(TrainingLoaderSection(batch_size=2))
    one_large_set = MemoryEstimate(graphs=1, nodes=1010, edges=15605, peak_mb=708, before_mb=360, limit_mb=600,
                                   limit_source="training.memory_limit_mb", measured="peak RSS",
                                   largest_set=(1010, 15605))
    assert "even the largest set alone (1010 nodes, 15605 edges) would not fit" in one_large_set.advice(
        TrainingLoaderSection(batch_size=2, batch_budget=BatchBudgetSection(edges=15605)))


def test_the_preflight_leaves_no_trace_in_the_weights_statistics_or_random_state(tiny_config):
    torch.manual_seed(0)
    with_preflight = QG.Trainer(tiny_config({"training.run_name": "on"}))
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    without = QG.Trainer(tiny_config({"training.run_name": "off", "training.preflight": False}))
    assert torch.equal(state, torch.random.get_rng_state())
    for (name, a), b in zip(with_preflight.core_model.state_dict().items(), without.core_model.state_dict().values()):
        assert torch.equal(a, b), name
    assert all(p.grad is None for p in with_preflight.core_model.parameters())
    assert with_preflight.memory_estimate.fits and without.memory_estimate is None
    with_preflight.close()
    without.close()


def test_doctor_prints_the_preflight_estimate_for_a_config(cli_in_process, config_file, tmp_path):
    result = cli_in_process("doctor", "--config", str(config_file), "--set", f"training.path={tmp_path / 'runs'}",
                            "--set", f"training.batch_budget.edges={EDGE_BUDGET}", cwd=tmp_path)
    line = next(line for line in result.stdout.splitlines() if "memory preflight" in line)
    assert line.startswith("[ok] memory preflight") and "the largest training batch (" in line, line
    assert f"edges within the budget {{edges: {EDGE_BUDGET}}}" in line or "edges)" in line
    refused = cli_in_process("doctor", "--config", str(config_file), "--set", "training.memory_limit_mb=1",
                             cwd=tmp_path)
    line = next(line for line in refused.stdout.splitlines() if "memory preflight" in line)
    assert line.startswith("[fail] memory preflight") and "training.memory_limit_mb" in line
    assert refused.returncode == 1
