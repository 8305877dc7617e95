"""Importable objects for the multi-process tests (spawned workers import them by name)."""

import torch
from torch import nn
from torch_geometric.nn import GraphConv

import QuantumGrav as QG
from QuantumGrav.distributed.runtime import Runtime

_calls = {"n": 0}


class ModelWithUnusedHead(nn.Module):
    """A GNN classifier plus a head that forward() never uses: DDP sees parameters without gradients."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.body = QG.GNNClassifier(in_channels, num_classes, conv=GraphConv, hidden_channels=[8],
                                     head_hidden=[], norm="none", pooling="mean_max", directions="forward")
        self.unused_head = nn.Linear(8, num_classes)

    def forward(self, data):
        return self.body(data)


def loss_failing_on_rank_1(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy, except that rank 1 raises on its 5th call (the trainer's signature check is the first)."""
    _calls["n"] += 1
    if QG.get_rank() == 1 and _calls["n"] == 5:
        raise ValueError("simulated failure in the loss on rank 1")
    return torch.nn.functional.cross_entropy(logits, target)


def loss_stalling_on_rank_1(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy, except that rank 1 sleeps for a minute on its 5th call: a stalled rank."""
    import time

    _calls["n"] += 1
    if QG.get_rank() == 1 and _calls["n"] == 5:
        time.sleep(60)
    return torch.nn.functional.cross_entropy(logits, target)


def loss_per_graph(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A common mistake: reduction='none' returns one loss per graph instead of a scalar."""
    return torch.nn.functional.cross_entropy(logits, target, reduction="none")


def wait_for_slow_main_process(rank: int, world_size: int, port: int, results, rank0_fails: bool) -> None:
    """Rank 0 takes 3 s inside main_process_first while collectives time out after 1 s: the
    others must wait (their wait has its own timeout), and the group must still work after.
    With ``rank0_fails`` rank 0's block raises instead, and the others must raise it too."""
    import time

    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo", timeout_s=1.0)
    try:
        runtime = Runtime(rank=rank, world_size=world_size)
        with runtime.main_process_first(timeout_s=30.0):
            if rank == 0:
                time.sleep(3.0)
                if rank0_fails:
                    raise QG.UserError("data.root: cannot write the data cache")
            finished = time.monotonic()
        total = runtime.sum_across_ranks(torch.ones(1))
        results.put((rank, finished, total.item()))
    except Exception as err:  # the parent asserts on what every rank reports
        results.put((rank, None, f"{type(err).__name__}: {err}"))
    finally:
        QG.cleanup_ddp()


def spawn_ranks(target, world_size: int, *args, timeout_s: float = 60.0, context=None) -> list[tuple]:
    """Run ``target(rank, world_size, port, results, *args)`` in ``world_size`` fresh processes (by default the
    library's worker context: forked from a server that imported torch once) and return what each put on
    ``results`` (one tuple per rank, in the order they arrived)."""
    from QuantumGrav.common.processes import worker_context

    context = context or worker_context()
    results, port = context.Queue(), QG.find_free_port()
    processes = [context.Process(target=target, args=(rank, world_size, port, results, *args))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    try:
        return [results.get(timeout=timeout_s) for _ in processes]
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()


def cross_entropy_slowly(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy that takes 0.1 s a call: epochs long enough to inject a fault in the middle of one."""
    import time

    time.sleep(0.1)
    return torch.nn.functional.cross_entropy(logits, target)


interrupt = {"at_call": None, "calls": 0}


def cross_entropy_interrupted(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy that raises KeyboardInterrupt at call ``interrupt["at_call"]`` (a process killed there)."""
    interrupt["calls"] += 1
    if interrupt["calls"] == interrupt["at_call"]:
        raise KeyboardInterrupt("killed")
    return torch.nn.functional.cross_entropy(logits, target)


def generate_with_a_failing_rank(rank: int, world_size: int, port: int, results) -> None:
    """Every rank runs its share inside every_rank_then_all; rank 1's raises. Both must raise, none hang."""
    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo", timeout_s=30.0)
    try:
        with Runtime(rank=rank, world_size=world_size).every_rank_then_all(timeout_s=30.0):
            if rank == 1:
                raise ValueError("block 3: no space left on device")
        results.put((rank, "finished"))
    except Exception as err:  # the parent asserts on what every rank reports
        results.put((rank, f"{type(err).__name__}: {err}"))
    finally:
        QG.cleanup_ddp()


class StopOnRank1(QG.Callback):
    """Votes to stop at the end of epoch ``at_epoch`` on rank 1 only: every rank must stop there."""

    def __init__(self, at_epoch: int = 1):
        self.at_epoch = at_epoch

    def on_epoch_end(self, trainer, record):
        if trainer.runtime.rank == 1 and record["epoch"] == self.at_epoch:
            return QG.Stop(f"rank 1 asked to stop at epoch {self.at_epoch}")
        return None


class ValError(QG.Callback):
    """Adds one metric per epoch (1 - val_accuracy) and counts the epochs it saw (kept across a resume)."""

    def __init__(self):
        self.epochs_seen = 0

    def on_epoch_end(self, trainer, record):
        self.epochs_seen += 1
        record["val_error"] = 1.0 - record["val_accuracy"]
        record["epochs_seen"] = self.epochs_seen

    def state_dict(self):
        return {"epochs_seen": self.epochs_seen}

    def load_state_dict(self, state):
        self.epochs_seen = state["epochs_seen"]


class CountValidations(QG.Callback):
    """Counts, in each process it reaches, how often a config is validated from the moment the process
    unpickles it (before its trainer exists) to the start of training; writes the count to
    ``folder/validations_rank_<rank>.txt``. In the launching process, pass it unpickled: it counts nothing there."""

    def __init__(self, folder: str):
        self.folder, self.count = folder, {"n": 0}

    def __setstate__(self, state):  # a worker receives its copy pickled, before run_job builds the trainer
        self.__dict__.update(state)
        import QuantumGrav.config.schema as config

        validate, count = config.validate_config, self.count

        def counting(*args, **kwargs):
            count["n"] += 1
            return validate(*args, **kwargs)

        config.validate_config = counting

    def on_fit_start(self, trainer):
        from pathlib import Path

        Path(self.folder, f"validations_rank_{trainer.runtime.rank}.txt").write_text(str(self.count["n"]))


def count_blocking_collectives(rank: int, world_size: int, port: int, results, config: dict) -> None:
    """Train one epoch under DDP while counting the blocking collectives this rank calls from Python
    (all_reduce, broadcast, all_gather_object and broadcast_object_list without async_op), per training batch."""
    import torch.distributed as dist

    QG.initialize_ddp(rank, world_size, master_port=port, backend="gloo", timeout_s=30)
    counts = {"blocking": 0, "batches": 0}
    try:
        trainer = QG.TrainerDDP(rank=rank, config=config)
        train_loader, val_loader, _ = trainer.prepare_dataloaders()
        for name in ("all_reduce", "broadcast", "all_gather_object", "broadcast_object_list"):
            original = getattr(dist, name)

            def counting(*args, _original=original, **kwargs):
                counts["blocking"] += not kwargs.get("async_op", False)
                return _original(*args, **kwargs)

            setattr(dist, name, counting)
        counts["batches"] = len(train_loader)
        trainer.run_training(train_loader, val_loader)
        trainer.close()
        results.put((rank, counts))
    finally:
        QG.cleanup_ddp()


class InterruptAtEpoch(QG.Callback):
    """Votes to interrupt (resumable) at the end of ``epoch`` on rank 0, the first time only (kept in its
    state, so the resumed run trains on)."""

    def __init__(self, epoch: int):
        self.epoch, self.done = epoch, False

    def on_epoch_end(self, trainer, record):
        if not self.done and trainer.runtime.rank == 0 and record["epoch"] == self.epoch:
            self.done = True
            return QG.Stop("a maintenance window", resumable=True)
        return None

    def state_dict(self):
        return {"done": self.done}

    def load_state_dict(self, state):
        self.done = state["done"]


class InterruptAtStep(QG.Callback):
    """Votes on rank 1 alone, after optimizer step ``step`` of epoch 0, to interrupt the run."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, trainer, epoch, completed_batches):
        if trainer.runtime.rank == 1 and epoch == 0 and completed_batches == self.step:
            return QG.Stop("rank 1 needs the node", resumable=True)
        return None


class HoldsALambda(QG.Callback):
    """A callback that cannot be pickled: it keeps a lambda."""

    def __init__(self):
        self.transform = lambda value: value


class RecordDenormalFlush(QG.Callback):
    """Writes flush_rank<R>.txt into ``folder`` at the start of training: how many values of a product that
    underflows to a denormal float32, split over the worker's thread pool, stayed nonzero (0: every thread
    flushes)."""

    def __init__(self, folder: str):
        self.folder = folder

    def on_fit_start(self, trainer):
        from pathlib import Path

        kept = int((torch.full((1 << 18,), 1e-20) * torch.full((1 << 18,), 1e-20)).count_nonzero())
        Path(self.folder, f"flush_rank{trainer.runtime.rank}.txt").write_text(str(kept))
