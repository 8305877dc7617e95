"""Every job exits: whatever order a user's script releases the trainer and the process group in.

The hang this guards against (see distributed.cleanup_ddp): when DDP's Reducer held the last
reference to the gloo group, the group's destructor ran with the GIL held and waited for gloo's
worker threads, one of which needed the GIL to free a finished collective's tensors. It struck a
run in five, so besides the deterministic check of the order (which fails on the old code every time),
the users' scripts run here a few times (twice the torchrun script at world size 3, where it hung, once
the mp.spawn one) and benchmarks/fault_tolerance/stress_teardown.py runs the same check 40 times per case and prints
the table.
"""

import sys
import weakref

import pytest
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import QuantumGrav as QG
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "fault_tolerance"))
import stress_teardown  # noqa: E402


@pytest.fixture
def one_process_group(monkeypatch):
    for variable in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):  # initialize_ddp exports them: undo after
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    QG.initialize_ddp(0, 1, master_port=QG.find_free_port(), backend="gloo")
    yield
    QG.cleanup_ddp()


def test_cleanup_frees_the_ddp_wrapper_while_the_group_still_exists(tiny_config, one_process_group, monkeypatch):
    trainer = QG.TrainerDDP(rank=0, config=tiny_config({"training.num_epochs": 1}))
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)
    wrapper = weakref.ref(trainer.model)
    assert isinstance(wrapper(), DistributedDataParallel)
    alive_at_destroy = []
    destroy = dist.destroy_process_group
    monkeypatch.setattr(dist, "destroy_process_group",
                        lambda *a, **k: (alive_at_destroy.append(wrapper() is not None), destroy(*a, **k))[1])
    QG.cleanup_ddp()  # the order of the DDP guide's scripts: the trainer is still alive here
    assert alive_at_destroy == [False], "DDP's Reducer still held the process group when it was destroyed"
    assert trainer.run_test(test_loader)["num_test"] > 0  # rank 0 can still test after cleanup_ddp()


@pytest.mark.parametrize("script, world_size, runs", [("torchrun", 3, 2), ("mp_spawn", 2, 1)])
def test_the_users_scripts_exit_every_time(tmp_path, script, world_size, runs):
    project = stress_teardown.UserProject(tmp_path)
    outcomes = stress_teardown.stress(script, world_size, runs, project, hang_after_s=45.0, limit_s=240.0)
    for outcome in outcomes:
        assert outcome.exit_code is not None, f"a job hung after its last line:\n{outcome.output[-3000:]}"
        assert outcome.exit_code == 0, outcome.output[-3000:]
