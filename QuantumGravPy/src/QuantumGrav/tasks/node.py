"""Is each element inside the inserted block? ``y`` is 0 or 1 per element, the model returns one logit per element
(``configs/inserted_block.yaml``)."""

from __future__ import annotations

import math

import torch

from .levels import ELEMENT
from .rows import RowBinaryTask


# The node task's totals, in this order. All but the loss sum are integers (the IoU in units of 1 / IOU_SCALE), so
# adding them over batches and ranks in any order gives the same bits: world size 2 reports what world size 1 does.
NODE_TOTALS = ("loss_sum", "nodes", "true_negatives", "false_positives", "false_negatives", "true_positives",
               "iou_units", "sets", "block_sets", "blockless_sets_marked")
IOU_SCALE = 2**32


class NodeBinaryTask(RowBinaryTask):
    """Outputs one logit per element ``[nodes, 1]``; target: 0.0 / 1.0 per element ``[nodes, 1]`` (float), 1 inside
    the inserted block. Positive: ``sigmoid(logit) >= threshold``. The loss is averaged over elements, the
    accuracy, precision, recall and F1 are the elements', and ``iou`` is the mean over the sets that have a true
    block (``block_sets`` of them) of |predicted block and true block| / |predicted or true block|: undefined (NaN)
    without such a set. A set without a block is reported apart: ``blockless_sets_marked`` counts those where some
    element was marked (an empty prediction there is right, and no IoU of 1 rewards a model that marks nothing).

    Under DDP the metrics are exact (integer sums), but training is not one process on the combined batch: each
    rank's loss is the mean over its own batch's elements and DDP averages the ranks' gradients, so the elements
    of a rank whose sets are smaller weigh more (equal only when the ranks hold equally many elements)."""

    summary = ("one 0/1 y per element: one logit per element, its metrics per element, and the mean block IoU per "
               "set")
    level = ELEMENT
    reports = {"loss": "min", "accuracy": "max", "precision": "max", "recall": "max", "f1": "max", "iou": "max"}
    rivals = ("QuantumGrav.analyses.node_rival.NodeRival",)
    analyses = ("QuantumGrav.analyses.figures.InsertedBlockFigure",)
    defect_size = "block_size"  # a merged set's inserted block: an applied run's metrics in bins of its size
    num_totals = len(NODE_TOTALS)
    min_rows = 2

    def shape_problem(self, y):
        return (f"a {self.type} task needs one 0/1 label per element (y of shape [nodes]), got shape "
                f"{list(y.shape)}, one value per causal set")

    def batch_totals(self, outputs, target, loss, graph_index: torch.Tensor | None = None):
        """The batch's totals (``NODE_TOTALS``); ``graph_index``: each element's graph in the batch (None: one)."""
        true, predicted = target.view(-1).long(), self.predict(outputs)
        graph_index = torch.zeros_like(true) if graph_index is None else graph_index.view(-1)
        confusion = torch.bincount(true * 2 + predicted, minlength=4).double()  # tn, fp, fn, tp
        iou, has_block, marked = block_iou(predicted.bool(), true.bool(), graph_index)
        count = float(true.numel())
        head = torch.tensor([count], device=outputs.device, dtype=torch.float64)
        tail = torch.stack([torch.round(iou[has_block] * IOU_SCALE).sum(), torch.tensor(float(iou.numel()),
                            device=iou.device, dtype=torch.float64), has_block.sum().double(),
                            (marked & ~has_block).sum().double()])
        return torch.cat([(loss.detach().double() * count).view(1), head, confusion, tail])

    def metrics(self, totals):
        loss_sum, nodes, tn, fp, fn, tp, iou_units, sets, block_sets, blockless_marked = totals.tolist()
        tn, fp, fn, tp = (int(round(v)) for v in (tn, fp, fn, tp))
        return {"loss": loss_sum / max(nodes, 1.0), "accuracy": (tp + tn) / max(nodes, 1.0),
                "precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
                "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
                "iou": iou_units / IOU_SCALE / block_sets if block_sets else math.nan, "block_sets": int(block_sets),
                "blockless_sets_marked": int(blockless_marked), "count": int(sets), "nodes": int(nodes),
                "confusion": [[tn, fp], [fn, tp]]}

    def undefined(self, metrics):
        found = super().undefined(metrics)
        iou = metrics.get("iou")
        if metrics.get("confusion") is not None and iou is not None and math.isnan(iou):
            found["iou"] = "no set has a true block (the IoU is averaged over the sets that have one)"
        return found

    def test_extras(self, test):
        return {**super().test_extras(test), "num_test_elements": test["nodes"]}


def block_iou(predicted: torch.Tensor, true: torch.Tensor, graph_index: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per graph (boolean per element, ``graph_index`` 0..graphs-1 per element): the float64 intersection over union
    of the predicted and the true block (1 where both are empty: read it where there is a true block), whether the
    graph has a true block, and whether any of its elements is predicted."""
    graphs = int(graph_index.max()) + 1 if graph_index.numel() else 0
    intersection = torch.zeros(graphs, dtype=torch.float64, device=true.device)
    union = torch.zeros_like(intersection)
    intersection.index_add_(0, graph_index, (predicted & true).double())
    union.index_add_(0, graph_index, (predicted | true).double())
    true_size = torch.zeros_like(intersection).index_add_(0, graph_index, true.double())
    iou = torch.where(union > 0, intersection / union.clamp(min=1.0), torch.ones_like(union))
    return iou, true_size > 0, union > true_size

