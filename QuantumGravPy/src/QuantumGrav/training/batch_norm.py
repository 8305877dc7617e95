"""Batch norm statistics recomputed over the training set before each validation ("precise BN").

Why: batch norm's running statistics average the last ten or so training batches (momentum 0.1). The default
job's batches of 32 sets mix five classes and sizes 64 to 128, so those averages swing from batch to batch:
the validation loss of the same weights jumped from 0.08 to 0.70 between epochs, and early stopping kept a
lucky low (benchmarks/stable_training/diagnose_training.py measures it; docs/stable_training.md). The exact
statistics of the whole training set at the current weights remove the swing; training itself, which
normalises each batch by its own statistics, is unchanged.

The pass runs batch norm in training mode (each batch normalised by its own statistics, as in training) and
everything else in eval mode (no dropout: evaluation has none); every batch norm's input sums, sums of
squares and counts are added up over all batches and all ranks, then divided.
"""

from __future__ import annotations

import math
from typing import Callable, ContextManager, Iterator

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ..distributed.runtime import Runtime


def batch_norms(model: torch.nn.Module) -> list[_BatchNorm]:
    """The batch norm layers that keep running statistics (PyG's BatchNorm wraps one of these)."""
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


class _InputMoments:
    """Per channel: the sum, the sum of squares and the count of one batch norm's inputs (float64)."""

    def __init__(self, norm: _BatchNorm):
        channels = norm.num_features
        self.sums = torch.zeros(2 * channels + 1, dtype=torch.float64, device=norm.running_mean.device)
        self.handle = norm.register_forward_pre_hook(self._add)

    def _add(self, module: _BatchNorm, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().double()
        x = x.transpose(0, 1).reshape(x.size(1), -1)  # [channels, values]: [N, C] and [N, C, L] alike
        channels = x.size(0)
        self.sums[:channels] += x.sum(1)
        self.sums[channels:2 * channels] += (x * x).sum(1)
        self.sums[-1] += x.size(1)


def _first_sets(loader, sets: int | None) -> Iterator:
    """``loader``'s batches, or its first ones up to at least ``sets`` graphs (whole batches: a batch-size
    budget makes them uneven)."""
    if sets is None:
        yield from loader
        return
    seen = 0
    for batch in loader:
        if seen >= sets:
            return
        seen += batch.num_graphs
        yield batch


@torch.no_grad()
def recompute_batch_norm_statistics(model: torch.nn.Module, loader, device: torch.device, runtime: Runtime,
                                    autocast: Callable[[], ContextManager], sets: int | None = None) -> bool:
    """Set every batch norm's running mean and (unbiased) variance to those of its inputs over ``loader``'s
    batches on every rank (``sets``: over the first batches of each rank up to at least ``sets`` graphs of the
    job, each rank its share). Every rank must call it (one all-reduce). False when the model has no batch norm
    (nothing is run)."""
    norms = batch_norms(model)
    if not norms:
        return False
    modes = {m: m.training for m in model.modules()}
    model.eval()
    for norm in norms:
        norm.train()
    moments = [_InputMoments(norm) for norm in norms]
    saved = [(n.running_mean.clone(), n.running_var.clone(), n.num_batches_tracked.clone()) for n in norms]
    try:
        share = None if sets is None else math.ceil(sets / runtime.world_size)
        for batch in _first_sets(loader, share):
            with autocast():
                model(batch.to(device, non_blocking=True))
    finally:
        for m in moments:
            m.handle.remove()
        for module, mode in modes.items():
            module.training = mode
    # Sums and counts of every rank together, then divided: every rank ends with the same statistics.
    totals = runtime.sum_across_ranks(torch.cat([m.sums for m in moments]))
    offset = 0
    for norm, m, (mean0, var0, batches0) in zip(norms, moments, saved):
        sums = totals[offset:offset + m.sums.numel()]
        offset += m.sums.numel()
        channels, count = norm.num_features, sums[-1]
        norm.num_batches_tracked.copy_(batches0)  # the pass's forward calls do not count as training
        if count < 2:  # nothing seen (a model whose norm the data never reach): keep the running statistics
            norm.running_mean.copy_(mean0)
            norm.running_var.copy_(var0)
            continue
        mean = sums[:channels] / count
        variance = (sums[channels:2 * channels] / count - mean * mean).clamp_min(0) * count / (count - 1)
        norm.running_mean.copy_(mean.to(norm.running_mean.dtype))
        norm.running_var.copy_(variance.to(norm.running_var.dtype))
    return True
