"""Was each pair's relation toggled? ``y`` is 0 or 1 per candidate pair of elements of a causal set (``levels``;
``data.relation_targets`` reads it from the stores), the model returns one logit per pair
(``configs/toggled_relations.yaml``): its loss, its totals and its metrics."""

from __future__ import annotations

import math

import torch

from .levels import PAIR, num_pairs
from .rows import RowBinaryTask


# A pair's state in the input (``pair_relation``, ``data.relation_targets``): what the model and the rivals see of it.
PAIR_STATES: tuple[str, ...] = ("unrelated", "related", "link")
# The relation task's totals, in this order: all but the loss sum are integer counts, so that adding them over
# batches and ranks in any order gives the same bits (world size 2 reports what world size 1 does).
RELATION_TOTALS = ("loss_sum", "pairs", "true_negatives", "false_positives", "false_negatives", "true_positives",
                   "sets", "changed_sets", "all_found_sets", "exact_sets", "unchanged_sets_marked")


class RelationBinaryTask(RowBinaryTask):
    """Outputs one logit per candidate pair of elements ``[pairs, 1]`` (each set's pairs i < j row by row,
    ``data.relation_targets``); target: 0.0 / 1.0 per pair ``[pairs, 1]`` (float), 1 where the pair's relation was
    added or removed. Positive: ``sigmoid(logit) >= threshold``.

    Scored per pair (precision, recall and F1 of the toggled pairs; accuracy would be about 1 for a model that
    marks nothing) and per set: ``all_found``, the share of the sets with a change whose every changed pair is
    marked (undefined without such a set), and ``exact``, the share of all sets whose marked pairs are exactly
    the changed ones (a set without a change: nothing marked). ``unchanged_sets_marked`` counts the sets without a
    change where something was marked.

    The imbalance (k changed pairs among N (N - 1) / 2) is met by the model, not by the loss: the loss is the plain
    BCE averaged over pairs, a proper scoring rule, so sigmoid(logit) stays a probability and ``threshold`` means
    what it says (a positive weight w would shift every logit by log w, and marking at 0.5 would then mark pairs
    that are far from likely). The built-in pair head (``models.pair_head``) starts each set's logits at the
    log-odds of one change among its pairs, so that the negatives' summed gradient, about their count times that
    prior, starts near the positives' instead of drowning it.

    Under DDP the metrics are exact (integer sums); each rank's loss is the mean over its own batch's pairs, so the
    pairs of a rank whose sets are smaller weigh more, as for the node task."""

    summary = ("one 0/1 y per pair of elements: one logit per pair, its metrics per pair, and per set whether every "
               "changed pair was found")
    level = PAIR
    reports = {"loss": "min", "f1": "max", "precision": "max", "recall": "max", "all_found": "max", "exact": "max"}
    rivals = ("QuantumGrav.analyses.relation_rival.RelationRival",)
    num_totals = len(RELATION_TOTALS)

    def shape_problem(self, y):
        return (f"a {self.type} task needs one 0/1 label per pair of elements (y of shape [pairs]), got "
                f"shape {list(y.shape)}")

    def item_problem(self, item):
        problem = self.target_problem(item.y)
        if problem:
            return problem
        expected = num_pairs(int(item.num_nodes))
        if item.y.numel() != expected:
            return (f"y has {item.y.numel()} labels, but a set of {item.num_nodes} elements has {expected} pairs "
                    f"(i < j, row by row)")
        states = getattr(item, "pair_relation", None)
        if not isinstance(states, torch.Tensor) or states.shape != (expected,):
            got = list(states.shape) if isinstance(states, torch.Tensor) else type(states).__name__
            return (f"a {self.type} item needs pair_relation, one state per pair ({', '.join(PAIR_STATES)}) of "
                    f"shape [{expected}], got {got}")
        parts = getattr(item, "violation_part", None)
        if not isinstance(parts, torch.Tensor) or parts.shape != (int(item.num_nodes), 2):
            got = list(parts.shape) if isinstance(parts, torch.Tensor) else type(parts).__name__
            return (f"a {self.type} item needs violation_part, each element's violating part in the 2D test's "
                    f"two tournaments (QuantumGrav.data.relation_targets.violation_part) of shape "
                    f"[{int(item.num_nodes)}, 2], got {got}")
        return None

    def batch_totals(self, outputs, target, loss, graph_index: torch.Tensor | None = None):
        """The batch's totals (``RELATION_TOTALS``); ``graph_index``: each pair's graph in the batch (None: one)."""
        true, predicted = target.view(-1).long(), self.predict(outputs)
        graph_index = torch.zeros_like(true) if graph_index is None else graph_index.view(-1)
        confusion = torch.bincount(true * 2 + predicted, minlength=4).double()  # tn, fp, fn, tp
        graphs = int(graph_index.max()) + 1 if graph_index.numel() else 0

        def per_set(values: torch.Tensor) -> torch.Tensor:
            return torch.zeros(graphs, dtype=torch.long, device=true.device).index_add_(0, graph_index, values)

        changed, marked, found = per_set(true), per_set(predicted), per_set(true * predicted)
        has_change = changed > 0
        counts = [float(true.numel()), graphs, has_change.sum(), (has_change & (found == changed)).sum(),
                  ((found == changed) & (marked == changed)).sum(), (~has_change & (marked > 0)).sum()]
        tail = torch.tensor([float(c) for c in counts], dtype=torch.float64, device=outputs.device)
        return torch.cat([(loss.detach().double() * float(true.numel())).view(1), tail[:1], confusion, tail[1:]])

    def metrics(self, totals):
        loss_sum, pairs, tn, fp, fn, tp, sets, changed_sets, all_found, exact, unchanged_marked = totals.tolist()
        tn, fp, fn, tp = (int(round(v)) for v in (tn, fp, fn, tp))
        return {"loss": loss_sum / max(pairs, 1.0), "precision": tp / (tp + fp) if tp + fp else 0.0,
                "recall": tp / (tp + fn) if tp + fn else 0.0, "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
                "all_found": all_found / changed_sets if changed_sets else math.nan,
                "exact": exact / sets if sets else math.nan, "changed_sets": int(changed_sets),
                "unchanged_sets_marked": int(unchanged_marked), "count": int(sets), "pairs": int(pairs),
                "confusion": [[tn, fp], [fn, tp]]}

    def undefined(self, metrics):
        found = super().undefined(metrics)
        if metrics.get("confusion") is not None:
            for name, why in (("all_found", "no set has a changed pair (all_found is a share of those sets)"),
                              ("exact", "no set was measured")):
                if math.isnan(metrics.get(name, 0.0)):
                    found[name] = why
        return found

    def test_extras(self, test):
        return {**super().test_extras(test), "num_test_pairs": test["pairs"],
                "num_test_changed_sets": test["changed_sets"],
                "num_test_unchanged_sets_marked": test["unchanged_sets_marked"]}
