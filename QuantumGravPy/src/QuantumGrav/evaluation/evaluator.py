"""Evaluation whose numbers are exact under DDP: sums and counts reduced over ranks, then divided.

``validation.mode: sharded``: every rank evaluates its shard (disjoint, no padding) and the task's totals
(loss sum, count, confusion matrix or error sums, ``QuantumGrav.tasks``) are summed over ranks, then turned into metrics
once: never an average of per-rank means. ``rank0``: rank 0 evaluates the whole split, the others get None.
Either way the numbers equal one process evaluating the split.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from ..distributed.runtime import Runtime
from ..tasks.base import Task
from ..tasks.levels import ELEMENT, PAIR, SET


class Evaluator:
    """Evaluates the plain (unwrapped) model on a loader: DDP's forward would broadcast buffers, a
    collective that hangs when ranks hold different numbers of evaluation batches."""

    def __init__(self, model: torch.nn.Module, task: Task, criterion: Callable, runtime: Runtime,
                 mode: str, autocast: Callable[[], Any]):
        self.model, self.task, self.criterion, self.runtime = model, task, criterion, runtime
        self.mode, self.autocast = mode, autocast
        self.level = task.level

    def evaluate(self, loader) -> dict[str, Any] | None:
        """The task's metrics (loss, count and the task's) of the current model on ``loader``."""
        if self.mode == "rank0":
            # Rank 0 evaluates the whole split; the others go straight on to the epoch's broadcast.
            return self.task.metrics(self.local_totals(loader)) if self.runtime.is_main else None
        self._sync_buffers_from_main()
        return self.task.metrics(self.runtime.sum_across_ranks(self.local_totals(loader)))

    @torch.no_grad()
    def local_totals(self, loader, predictions: list | None = None, scores: list | None = None) -> torch.Tensor:
        """The task's metric totals over this rank's batches; each graph's (prediction, true value, flip
        fraction) is appended to ``predictions`` when it is given, and for a binary task its probability of the
        positive class to ``scores`` (what the ROC-AUC ranks)."""
        totals = self.task.zero_totals(next(self.model.parameters()).device)
        for outputs, target, batch in self.outputs(loader):
            loss = self.criterion(outputs, target)
            # A task with several output rows per set (the node task's block IoU) totals per set: it needs each
            # row's graph.
            totals += (self.task.batch_totals(outputs, target, loss, self.level.row_graphs(batch))
                       if self.level is not SET else self.task.batch_totals(outputs, target, loss))
            if predictions is not None:
                predictions += self._per_graph(outputs, target, batch)
            positive = self.task.positive_scores(outputs) if scores is not None else None
            if positive is not None:
                scores += positive.tolist()
        return totals

    def outputs(self, loader) -> Iterator[tuple[torch.Tensor, torch.Tensor, Any]]:
        """(outputs as float32, the task's target, the batch) for each batch of ``loader``: the one forward pass of
        evaluation (eval mode, no gradients, the run's autocast), whatever is computed from it (the metric totals
        here, an applied run's predictions)."""
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        try:
            for batch in loader:
                batch = batch.to(device, non_blocking=True)
                with torch.no_grad(), self.autocast():
                    outputs = self.model(batch)
                yield outputs.float(), self.task.target(batch.y), batch
        finally:
            self.model.train(was_training)

    def _per_graph(self, outputs: torch.Tensor, target: torch.Tensor, batch) -> list[tuple[Any, Any, float]]:
        """(prediction, true value, flip fraction) of each graph: the predicted class for classification, the
        output for regression, the list of predicted and of true 0/1 labels of its elements for a node task; the
        flip fraction is NaN for data without one; for a relation task the candidate pairs (their positions in the
        set's list, ``data.relation_targets``) it marks and those that changed, since all its pairs are N^2 / 2."""
        if self.level is PAIR:
            starts = torch.cumsum(torch.bincount(self.level.row_graphs(batch), minlength=batch.num_graphs), 0).tolist()
            predicted, true = self.task.predict(outputs).bool(), target.view(-1) > 0.5
            return [(torch.nonzero(predicted[a:b]).view(-1).tolist(), torch.nonzero(true[a:b]).view(-1).tolist(),
                     math.nan) for a, b in zip([0, *starts[:-1]], starts)]
        if self.level is ELEMENT:
            sizes = torch.bincount(batch.batch, minlength=batch.num_graphs).tolist()
            predicted = self.task.predict(outputs).split(sizes)
            true = target.view(-1).long().split(sizes)
            return [(p.tolist(), t.tolist(), math.nan) for p, t in zip(predicted, true)]
        predicted = self.task.predicted(outputs)
        fractions = batch.flip_fraction.view(-1).tolist() if "flip_fraction" in batch else [math.nan] * len(predicted)
        return list(zip(predicted.tolist(), target.view(-1).tolist(), fractions))

    def _sync_buffers_from_main(self) -> None:
        # Each rank's last training forward updated its own BatchNorm running statistics;
        # evaluate every shard with rank 0's, so the result equals one process evaluating rank 0's model.
        if self.runtime.distributed:
            for buffer in self.model.buffers():
                dist.broadcast(buffer, src=0)
