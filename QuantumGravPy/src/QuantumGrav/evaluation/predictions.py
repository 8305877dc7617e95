"""A trained model's predictions on some data (an applied run, ``jobs.applied_run``) and the metrics read from them.

Each rank predicts its shard of the sets; the shards are gathered to rank 0 and put back in the data's order
(``Predictions.merged``), and every number is computed there, once, from all of them: so one process and N give the
same metrics, the counts exactly. The task's own metrics come from ``tasks`` (the code the run's test used); the F1
per class and weighted by support with them (from the confusion matrix), and the recall per kind of causal set from
the same predictions.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from . import tasks
from .kinds import describe_threshold, mean_by_kind, recall_by_kind
from .scores import classification_metrics
from .undefined import undefined_metrics, with_undefined_as_none
from ..config.sections.task import TASK_METRICS
from ..data.causal_sets import CSET_TYPES
from ..data.zarr_store import JULIA_CSET_TYPES
from ..common.files import atomic_replace, atomic_write_text

Batches = Iterable[tuple[torch.Tensor, torch.Tensor, Any]]  # (outputs, target, batch): Evaluator.outputs


def kinds_of(batch, target: torch.Tensor, task: tasks.Task) -> list[str]:
    """What kind of causal set each graph of ``batch`` is: QuantumGrav.jl's cset_type name for a store's sets, the
    generator's cset type for its own, else its true class (classification) or ``all`` (regression), so that
    every prediction has a kind to be counted under."""
    if "julia_cset_type" in batch:
        return [JULIA_CSET_TYPES[code] for code in batch.julia_cset_type.view(-1).tolist()]
    if "cset_type" in batch:
        return [CSET_TYPES[code] for code in batch.cset_type.view(-1).tolist()]
    if isinstance(task, tasks.ClassificationTask):
        return [task.class_names[int(value)] for value in target.view(-1).tolist()]
    return ["all"] * batch.num_graphs


@dataclass
class Predictions:
    """The model's outputs on some sets of the data: ``sets`` their indices in the data, ``kinds`` what kind each
    is, ``outputs`` [sets, output width] and ``targets`` in the task's form (``Task.target``); each set's
    ``num_elements`` and, where the sets carry them, its order ``invariants`` [sets, K] (what the training range
    is judged on)."""

    sets: list[int]
    kinds: list[str]
    outputs: torch.Tensor
    targets: torch.Tensor
    num_elements: list[int] = field(default_factory=list)
    invariants: torch.Tensor | None = None

    @classmethod
    def from_batches(cls, batches: Batches, sets: Sequence[int], task: tasks.Task) -> "Predictions":
        """``batches`` of the sets ``sets``, in that order (a loader over them, not shuffled)."""
        outputs, targets, kinds, sizes, invariants = [], [], [], [], []
        for output, target, batch in batches:
            outputs.append(output.cpu())
            targets.append(target.cpu())
            kinds += kinds_of(batch, target, task)
            sizes += torch.bincount(batch.batch.cpu(), minlength=batch.num_graphs).tolist()
            if "invariants" in batch:
                invariants.append(batch.invariants.cpu().double().reshape(batch.num_graphs, -1))
        if not outputs:  # a rank with no sets (more processes than sets)
            empty = torch.zeros(0, task.output_width)
            return cls([], [], empty, task.target(torch.zeros(0)))
        return cls(list(sets), kinds, torch.cat(outputs), torch.cat(targets), sizes,
                   torch.cat(invariants) if len(invariants) == len(outputs) else None)

    @classmethod
    def merged(cls, parts: Sequence["Predictions"]) -> "Predictions":
        """Every rank's part, in the data's order."""
        sets = [index for part in parts for index in part.sets]
        order = sorted(range(len(sets)), key=sets.__getitem__)
        kinds = [kind for part in parts for kind in part.kinds]
        outputs, targets = torch.cat([p.outputs for p in parts]), torch.cat([p.targets for p in parts])
        sizes = [n for part in parts for n in part.num_elements]
        rows = [p.invariants for p in parts if p.sets]
        invariants = torch.cat(rows)[order] if rows and all(r is not None for r in rows) else None
        return cls([sets[i] for i in order], [kinds[i] for i in order], outputs[order], targets[order],
                   [sizes[i] for i in order], invariants)

    def metrics(self, task: tasks.Task, criterion: Callable) -> dict[str, Any]:
        """The task's metrics (as the run's test reports them, its loss the mean over all sets), and per kind:
        sets and recall (classification) or mean absolute error (regression); the F1 of each class (by name) and
        their mean weighted by support come with the task's metrics, from the confusion matrix. A metric that the
        sets cannot define (a precision without any set predicted positive, the F1 of a class with no set, neither
        true nor predicted) is None, and ``undefined`` says why (``evaluation.undefined``)."""
        totals = task.batch_totals(self.outputs, self.targets, criterion(self.outputs, self.targets))
        result = task.metrics(totals)
        if not isinstance(task, tasks.ClassificationTask):
            errors = (self.outputs.double().view(-1) - self.targets.double().view(-1)).abs().tolist()
            return {**result, "per_kind": mean_by_kind(self.kinds, errors, "mae"),
                    "undefined": undefined_metrics(task, result)}
        true, predicted = self.targets.view(-1).long().tolist(), task.predict(self.outputs).tolist()
        correct = [float(t == p) for t, p in zip(true, predicted)]
        positive = torch.sigmoid(self.outputs.view(-1)).numpy() if isinstance(task, tasks.BinaryTask) else None
        ranking = classification_metrics(np.array(true, dtype=np.int64), np.array(predicted, dtype=np.int64),
                                         task.num_classes, positive) if true else {}
        undefined = undefined_metrics(task, result)
        result = {**result, "per_class_f1": dict(zip(task.class_names, result["per_class_f1"])),
                  **{key: ranking[key] for key in ("balanced_accuracy", "roc_auc") if key in ranking},
                  "per_kind": recall_by_kind(self.kinds, correct)}
        return {**with_undefined_as_none(result, undefined), "undefined": undefined}

    def constant_prediction(self, task: tasks.Task) -> str | None:
        """The class a classifier predicted for every set, if it predicted one only (None otherwise)."""
        if not isinstance(task, tasks.ClassificationTask) or not self.sets:
            return None
        predicted = set(task.predict(self.outputs).tolist())
        return task.class_names[predicted.pop()] if len(predicted) == 1 else None

    def rows(self, task: tasks.Task, describe_set: Callable[[int], dict[str, Any]],
             outside: list[list[str]] | None = None,
             parameters: Callable[[int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One row per set: what identifies it (``describe_set(index)``: its index in the data, and for a store's
        sets the store and group), its kind and ``num_elements``, the truth, and the score: the probability of the
        positive class (binary), the predicted class and its probability (multiclass), the predicted value
        (regression); ``outside_training_range``: what of the set lies outside the range the run was trained on
        (``outside``: names per set; empty inside it, ``unknown`` for a run that does not record it); then the
        set's own parameters where the data records them (``parameters(index)``: a store's ``describe``)."""
        ids = [describe_set(index) for index in self.sets]
        flags = [";".join(names) for names in outside] if outside is not None else ["unknown"] * len(ids)
        extra = [parameters(index) for index in self.sets] if parameters is not None else [{}] * len(ids)
        sizes = self.num_elements or [None] * len(ids)
        if not isinstance(task, tasks.ClassificationTask):
            scored = [{"truth": truth, "score": value} for truth, value in
                      zip(self.targets.view(-1).tolist(), self.outputs.view(-1).tolist())]
        else:
            if isinstance(task, tasks.BinaryTask):
                scores = torch.sigmoid(self.outputs.view(-1))
            else:
                scores = torch.softmax(self.outputs, dim=-1).max(dim=-1).values
            names = task.class_names
            scored = [{"truth": names[truth], "predicted": names[predicted], "score": score} for truth, predicted, score
                      in zip(self.targets.view(-1).long().tolist(), task.predict(self.outputs).tolist(), scores.tolist())]
        return [{**row, "kind": kind, "num_elements": n, **score, "outside_training_range": flag, **more}
                for row, kind, n, score, flag, more in zip(ids, self.kinds, sizes, scored, flags, extra)]


def write_predictions(csv_path: Path, rows: list[dict[str, Any]], json_path: Path, metrics: dict[str, Any]) -> None:
    """The rows as a CSV and the metrics as JSON, each written whole or not at all (``files.atomic_replace``)."""
    columns = list(dict.fromkeys(key for row in rows for key in row)) or ["set"]  # every row's, in first-seen order

    def write_csv(tmp: str) -> None:
        with open(tmp, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=columns)
            writer.writeheader()
            writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)

    atomic_replace(csv_path, write_csv)
    atomic_write_text(json_path, json.dumps(metrics, indent=2) + "\n")


def _cell(value: Any) -> Any:
    """A CSV cell: lists and mappings (a set's recorded parameters) as JSON, the rest as they are."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def describe_evaluation(result: dict[str, Any]) -> str:
    """The short table the command line prints: the task's metrics, F1 per class, then each kind's sets and recall
    (or mean absolute error), the detection thresholds with how to read them, what is undefined and why, the notes
    (sets outside the training range, sets closed or left out), and where the files are."""
    shown = [m for m in TASK_METRICS[result["task"]] if m != "loss"]
    scores = "  ".join(f"{m} {_number(result[m])}" for m in shown)
    ranking = [m for m in ("balanced_accuracy", "roc_auc") if m in result]
    scores += "".join(f"  {m} {_number(result[m])}" for m in ranking)
    lines = ["", f"=== {result['run']} applied to {result['data_name']} ({result['count']} causal sets) ===",
             f"{scores}  (loss {result['loss']:.4f})"]
    width = max(len(name) for name in [*result.get("per_class_f1", {}), *result["per_kind"], "class"]) + 2
    if "per_class_f1" in result:
        lines += [f"{'class':<{width}}{'F1':>8}"]
        lines += [f"{name:<{width}}{_number(f1):>8}" for name, f1 in result["per_class_f1"].items()]
    measure = "recall" if "per_class_f1" in result else "mae"
    interval = "recall_low" in next(iter(result["per_kind"].values()), {})
    lines += [f"{'kind':<{width}}{'sets':>8}{measure:>8}" + ("  95% interval" if interval else "")]
    lines += [f"{kind:<{width}}{row['sets']:>8}{row[measure]:>8.3f}"
              + (f"  {row['recall_low']:.3f}-{row['recall_high']:.3f}" if interval else "")
              for kind, row in result["per_kind"].items()]
    lines += describe_thresholds(result)
    lines += [f"undefined: {name}: {why}" for name, why in result.get("undefined", {}).items()]
    lines += [f"note: {note}" for note in result.get("notes", [])]
    lines += [f"predictions     {result['predictions_csv']}", f"metrics         {result['metrics_json']}"]
    return "\n".join(lines)


THRESHOLD_CAVEAT = ("read each threshold beside the recall of the manifold-like kinds (polynomial, complex_topology) "
                    "above: a model that calls nearly every set not manifold-like recognises the smallest defects "
                    "for free")


def describe_thresholds(result: dict[str, Any]) -> list[str]:
    """The smallest defect recognised at 90 % recall per kind, with how to read it; none for a model that predicts
    one class for every set (its 'threshold' would measure nothing but that)."""
    by_size = result.get("by_defect_size", {})
    if not by_size:
        return []
    constant = result.get("constant_prediction")
    if constant is not None:
        return [f"thresholds: none shown; the model predicts {constant} for every set, so a detection threshold "
                f"would measure that, not the defects"]
    lines = [f"{kind}: 90% recall crossed at {sizes['size']} {describe_threshold(sizes['model']['threshold_at_90'])}"
             for kind, sizes in by_size.items()]
    return lines + [f"thresholds: {THRESHOLD_CAVEAT}"]


def _number(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.3f}"
