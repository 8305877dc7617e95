"""TrainerDDP on CPU with gloo, world sizes 1 to 3: the properties that make DDP trustworthy."""

import csv
from pathlib import Path

import pytest
import torch

import QuantumGrav as QG
from QuantumGrav.config.yaml_io import resolve_pyobject

SGD = resolve_pyobject("torch.optim.SGD")


def _last_state(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)


def _rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _split_sizes(config):
    d = config["data"]
    return [len(s) for s in QG.split_indices(d["num_samples"], d["split"], d["split_seed"])]


@pytest.fixture
def equivalence_config(tiny_config):
    """One epoch of plain SGD on full batches, no BatchNorm or dropout (their statistics depend on
    the batch composition), so parameters depend only on which samples form each optimizer step."""

    def make(batch_size: int, accumulation: int, name: str) -> dict:
        config = tiny_config({
            "training.num_epochs": 1, "training.batch_size": batch_size, "training.accumulation_steps": accumulation,
            "training.optimizer_type": SGD, "training.optimizer_kwargs": {"lr": 0.1}, "training.run_name": name,
            "model.norm": "none", "data.num_samples": 80, "data.split": [0.8, 0.1, 0.1]})
        assert _split_sizes(config)[0] % 16 == 0, "train split must fill every batch of every setup"
        return config

    return make


@pytest.mark.parametrize("world_size, batch_size, accumulation", [(2, 8, 1), (2, 4, 2), (1, 8, 2)],
                         ids=["ddp2", "ddp2-accumulation2", "single-accumulation2"])
def test_parameters_equal_one_process_trained_on_the_combined_batches(equivalence_config, world_size, batch_size,
                                                                      accumulation):
    reference = QG.launch(equivalence_config(16, 1, "reference"), nproc=1)
    result = QG.launch(equivalence_config(batch_size, accumulation, "candidate"), nproc=world_size)
    expected, got = _last_state(Path(reference["run_dir"]))["model"], _last_state(Path(result["run_dir"]))["model"]
    changed = [name for name in expected if not torch.equal(expected[name], got[name])]
    assert changed, "sanity: candidate and reference are different runs"
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_validation_metrics_are_exact_for_sharded_and_rank0_modes(tiny_config):
    overrides = {"training.num_epochs": 2, "validation.batch_size": 3, "data.num_samples": 100}
    sizes = _split_sizes(tiny_config(overrides))
    assert sizes[1] % 3 != 0, "the validation split must not divide evenly over 3 ranks"
    results = {mode: QG.launch(tiny_config({**overrides, "validation.mode": mode, "training.run_name": mode}), nproc=3)
               for mode in ("sharded", "rank0")}
    for mode, result in results.items():
        run_dir = Path(result["run_dir"])
        single = QG.Trainer(tiny_config({**overrides, "training.run_name": f"check-{mode}"}))
        single.core_model.load_state_dict(_last_state(run_dir)["model"])
        _, val_loader, _ = single.prepare_dataloaders()
        expected = single.evaluate(val_loader)
        last = result["history"][-1]
        assert expected["count"] == sizes[1]
        assert last["val_loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert last["val_accuracy"] == pytest.approx(expected["accuracy"], abs=1e-9)
        assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["rank_0.log", "rank_1.log", "rank_2.log"]
        assert len(_rows(run_dir)) == 2  # one metrics file, written once per epoch by rank 0
    sharded, rank0 = (results[m]["history"] for m in ("sharded", "rank0"))
    for a, b in zip(sharded, rank0):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-5)


def test_rank0_decides_early_stopping_and_every_rank_stops_at_the_same_epoch(tiny_config):
    config = tiny_config({"training.num_epochs": 10, "early_stopping.patience": 1, "early_stopping.min_delta": 100.0,
                          "data.destroy_fraction": [0.001, 0.1]})
    result = QG.launch(config, nproc=2)
    run_dir = Path(result["run_dir"])
    assert [r["epoch"] for r in result["history"]] == [0, 1]
    for rank in (0, 1):
        log = (run_dir / "logs" / f"rank_{rank}.log").read_text()
        assert "training finished at epoch 1: early stopping" in log, log
    assert result["summary"]["stop_reason"].startswith("early stopping")
    # The destroyed test sets per flip fraction: the same counts as one process testing the same model.
    curves = result["summary"]["destroyed_by_flip_fraction"]
    single = QG.Trainer(QG.apply_overrides(config, {"training.run_name": "single"}))
    single.core_model.load_state_dict(torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)["model"])
    test = single.run_test(single.prepare_dataloaders()[2])
    single.close()
    assert test["destroyed_by_flip_fraction"] == curves
    destroyed = [i for i in single.split["test"] if float(single.dataset[i].flip_fraction) > 0]
    assert len(destroyed) >= 2 and sum(curves["destroyed_sets"]) == len(destroyed)
    label = test["class_names"].index("destroyed")
    assert sum(curves["recognised"]["gnn"]) == test["confusion_matrix"][label][label]


def test_trainer_ddp_with_world_size_1_matches_trainer(tiny_config, monkeypatch):
    for variable in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):  # initialize_ddp exports them: undo after
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    plain = QG.launch(tiny_config({"training.run_name": "plain", "training.num_epochs": 2}), nproc=1)
    QG.initialize_ddp(0, 1, master_port=QG.find_free_port(), backend="gloo")
    try:
        ddp = QG.run_job(tiny_config({"training.run_name": "ddp1", "training.num_epochs": 2}))
    finally:
        QG.cleanup_ddp()
    QG.cleanup_ddp()  # safe to call twice
    assert len(plain["history"]) == len(ddp["history"]) == 2
    for a, b in zip(plain["history"], ddp["history"]):
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)


def test_unused_parameters_are_named_with_the_config_key_to_change(tiny_config, tmp_path):
    config = tiny_config({"model.type": resolve_pyobject("ddp_helpers.ModelWithUnusedHead")})
    with pytest.raises(QG.UserError, match=r"unused_head\.weight, unused_head\.bias.*parallel\.find_unused_parameters: true"):
        QG.launch(config, nproc=2)
    assert not any((tmp_path / "runs").iterdir()), "a run that failed on bad input leaves nothing behind"


def test_find_unused_parameters_true_without_unused_ones_suggests_turning_it_off(tiny_config):
    result = QG.launch(tiny_config({"parallel.find_unused_parameters": True, "training.num_epochs": 1}), nproc=2)
    log = (Path(result["run_dir"]) / "logs" / "rank_0.log").read_text()
    assert log.count("parallel.find_unused_parameters is true but every parameter received a gradient") == 1


def test_a_failing_rank_brings_the_job_down_with_its_rank_and_error(tiny_config):
    config = tiny_config({"criterion": resolve_pyobject("ddp_helpers.loss_failing_on_rank_1"),
                          "training.num_epochs": 5, "parallel.timeout_s": 20})
    with pytest.raises(QG.TrainingFailed) as info:
        QG.launch(config, nproc=2)
    assert info.value.rank == 1
    assert "ValueError: simulated failure in the loss on rank 1" in str(info.value)
    assert "in loss_failing_on_rank_1" in info.value.worker_traceback
    rank_1_log = next((tmp_path_of(config) / "runs").glob("*/logs/rank_1.log")).read_text()
    assert "Traceback" in rank_1_log and "simulated failure" in rank_1_log, "the rank's log holds its traceback"


def tmp_path_of(config):
    return Path(config["training"]["path"]).parent


def test_nproc_must_be_at_least_1(tiny_config):
    with pytest.raises(QG.UserError, match="nproc: expected an integer >= 1, got 0"):
        QG.launch(tiny_config(), nproc=0)


def test_a_notebook_defined_loss_is_refused_before_spawning(tiny_config):
    def my_loss(logits, target):
        return logits.sum()

    with pytest.raises(QG.UserError, match=r"criterion = .*my_loss: spawned worker processes cannot import"):
        QG.launch(tiny_config({"criterion": my_loss}), nproc=2)


def test_a_port_in_use_is_reported_with_the_key_to_change(tiny_config):
    import socket

    with socket.socket() as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(QG.UserError, match=rf"rank 0: the rendezvous port localhost:{port} is already in use.*"
                                               r"parallel.master_port: null"):
            QG.launch(tiny_config(), nproc=2, port=port)


def _run_two_ranks_with_slow_main_process(rank0_fails: bool) -> dict[int, tuple]:
    from ddp_helpers import spawn_ranks, wait_for_slow_main_process
    reports = spawn_ranks(wait_for_slow_main_process, 2, rank0_fails)
    return {rank: (finished, outcome) for rank, finished, outcome in reports}


def test_ranks_wait_for_slow_data_generation_beyond_the_collective_timeout():
    # Generating a large data set on rank 0 may take far longer than parallel.timeout_s.
    reports = _run_two_ranks_with_slow_main_process(rank0_fails=False)
    assert reports[0][1] == reports[1][1] == 2.0, reports  # both ranks passed the wait, the group still works
    assert reports[1][0] >= reports[0][0], "rank 1 entered the block only after rank 0 had finished it"


def test_a_rank_0_failure_while_the_others_wait_for_data_reaches_them_at_once():
    reports = _run_two_ranks_with_slow_main_process(rank0_fails=True)
    assert reports[0][1] == reports[1][1] == "UserError: data.root: cannot write the data cache", reports


def test_ddp_gets_the_local_rank_as_device_ids_on_gpus_and_none_on_cpus(monkeypatch):
    """device_ids must be [LOCAL_RANK], an integer index of this node's GPUs, never a torch.device or the global
    rank; on a CPU DDP gets none. (No GPU here: DDP's constructor is recorded.)"""
    from types import SimpleNamespace

    from QuantumGrav.config.sections.parallel import ParallelSection
    from QuantumGrav.distributed.environment import resolve_device
    from QuantumGrav.training import ddp as train_ddp

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto", local_rank=1) == resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    wrapped = []
    monkeypatch.setattr(train_ddp, "DistributedDataParallel", lambda model, **kwargs: wrapped.append(kwargs))
    sections = SimpleNamespace(parallel=ParallelSection(output_device=None, find_unused_parameters=False))
    for device in (torch.device("cuda", 1), torch.device("cpu")):
        train_ddp.TrainerDDP._wrap_model(SimpleNamespace(sections=sections, device=device), torch.nn.Linear(1, 1))
    on_gpu, on_cpu = wrapped
    assert on_gpu["device_ids"] == [1] and type(on_gpu["device_ids"][0]) is int and on_gpu["output_device"] == 1
    assert "device_ids" not in on_cpu and "output_device" not in on_cpu
