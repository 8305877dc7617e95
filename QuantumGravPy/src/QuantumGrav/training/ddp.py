"""``TrainerDDP``: the ``Trainer`` loop run by every process of a DDP job.

Usage inside each process::

    from QuantumGrav.train_ddp import TrainerDDP, initialize_ddp, cleanup_ddp

    initialize_ddp(rank, world_size, master_port=port)        # or torchrun's environment
    trainer = TrainerDDP(rank=rank, config=config)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    trainer.run_training(train_loader, val_loader)            # every rank
    if rank == 0:
        trainer.run_test(test_loader)
    cleanup_ddp()

The only differences from ``Trainer`` are the process group in ``self.runtime`` and
the DistributedDataParallel wrapper; the loop itself is shared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..callbacks.base import Callback
from ..config.schema import ResolvedConfig, with_world_size
from ..distributed.process_group import release_before_teardown
from ..distributed.runtime import Runtime
from ..common.errors import ConfigError, UserError
from ..common.logging_utils import get_logger, rank_zero_warn
from .trainer import Trainer

logger = get_logger("train_ddp")


class TrainerDDP(Trainer):
    """The trainer of one rank of a DDP job: the model wrapped in ``DistributedDataParallel``, each rank
    training on its shard; every rank validates its shard of the validation set (``validation.mode: sharded``,
    exact: sums and counts reduced) and rank 0 writes; every rank acts on one decision per epoch, gathered from
    every rank's callback votes. The API is ``Trainer``'s.

    Args:
        rank: this process's global rank; must be its rank in the process group.
        config: a config path, dict or resolved config.
        dataset: train on this PyG Dataset or sequence of ``Data`` instead of the configured one.
        callbacks: ``QG.Callback`` instances run with the built-in ones, on every rank.

    Raises:
        UserError: no process group (call ``initialize_ddp`` first), a rank that is not the process's, or
            NCCL with a CPU device.
        ConfigError: an invalid config.

    Example:
        >>> from QuantumGrav.train_ddp import TrainerDDP, initialize_ddp, cleanup_ddp
        >>> initialize_ddp()  # under torchrun  # doctest: +SKIP
        >>> trainer = TrainerDDP(rank, "configs/train_ddp.yaml")  # doctest: +SKIP
    """

    def __init__(self, rank: int, config: dict | str | Path, dataset: Any = None, callbacks: Sequence[Callback] = ()):
        if not dist.is_initialized():
            raise UserError("TrainerDDP needs a process group: call initialize_ddp(rank, world_size, "
                            "master_port=...) first, start the script with torchrun, or use QG.launch(config, nproc)")
        if rank != dist.get_rank():
            raise UserError(f"TrainerDDP(rank={rank}) but this process has rank {dist.get_rank()} in the process group")
        super().__init__(config, dataset=dataset, callbacks=callbacks)
        release_before_teardown(self)  # cleanup_ddp() frees our DDP wrapper before the process group

    def _config_for_this_job(self, config: ResolvedConfig) -> ResolvedConfig:
        """The config with the process group's world size, which the run's config.yaml then records: the one place
        a job's config gets it (QG.launch's workers, torchrun's, a script's), once per process."""
        configured, world_size = config.sections.parallel.world_size, dist.get_world_size()
        if configured not in (1, world_size):
            rank_zero_warn(logger, f"parallel.world_size is {configured} but the job has {world_size} processes; "
                                   f"using {world_size}")
        return with_world_size(config, world_size)

    def _runtime(self) -> Runtime:
        return Runtime.in_process_group(self.sections.loop.device)

    def release_ddp(self) -> None:
        """Drop the DistributedDataParallel wrapper (called by cleanup_ddp(), see there why). The
        plain model stays: rank 0 can still run_test(), which never used the wrapper."""
        self.model = self.core_model

    def _wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        parallel = self.sections.parallel
        if self.device.type == "cuda":
            # device_ids are integer indices of this node's GPUs: LOCAL_RANK, never the
            # global rank and never a torch.device.
            if parallel.output_device not in (None, self.device.index):
                raise ConfigError(f"parallel.output_device: {parallel.output_device} is not this process's GPU "
                                  f"{self.device.index} (LOCAL_RANK); leave it null")
            return DistributedDataParallel(model, device_ids=[self.device.index], output_device=self.device.index,
                                           find_unused_parameters=parallel.find_unused_parameters)
        # CPU (gloo): DDP must get no device_ids at all.
        return DistributedDataParallel(model, find_unused_parameters=parallel.find_unused_parameters)
