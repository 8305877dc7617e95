"""A trained model's predictions on some data (an applied run, ``jobs.applied_run``) and the metrics read from them.

Each rank predicts its shard of the sets; the shards are gathered to rank 0 and put back in the data's order
(``Predictions.merged``), and every number is computed there, once, from all of them: so one process and N give the
same metrics, the counts exactly. The task's own metrics come from the task (``QuantumGrav.tasks``) (the code the run's test used); the F1
per class and weighted by support with them (from the confusion matrix), and the recall per kind of causal set from
the same predictions.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from .kinds import describe_threshold, mean_by_kind, recall_by_kind
from .scores import classification_metrics
from .undefined import unlabelled_metrics, with_undefined_as_none
from ..tasks.base import Task
from ..tasks.classification import ClassificationTask
from ..tasks.registry import task_class
from ..data.causal_sets import CSET_TYPES
from ..data.zarr_store import JULIA_CSET_TYPES
from ..common.files import atomic_replace, atomic_write_text

Batches = Iterable[tuple[torch.Tensor, torch.Tensor, Any]]  # (outputs, target, batch): Evaluator.outputs


def kinds_of(batch, target: torch.Tensor, task: Task) -> list[str]:
    """What kind of causal set each graph of ``batch`` is: QuantumGrav.jl's cset_type name for a store's sets, the
    generator's cset type for its own, else its true class (classification) or ``all`` (regression), so that
    every prediction has a kind to be counted under."""
    if "julia_cset_type" in batch:
        return [JULIA_CSET_TYPES[code] for code in batch.julia_cset_type.view(-1).tolist()]
    if "cset_type" in batch:
        return [CSET_TYPES[code] for code in batch.cset_type.view(-1).tolist()]
    if isinstance(task, ClassificationTask):
        return [task.class_names[int(value)] for value in target.view(-1).tolist()]
    return ["all"] * batch.num_graphs


@dataclass
class Predictions:
    """The model's outputs on some sets of the data, one row per output row of the model (per set, or per element
    of each set: the task's ``tasks.levels.OutputLevel``): ``sets`` their indices in the data, ``kinds`` what kind each
    is, ``outputs`` [rows, output width] and ``targets`` in the task's form (``Task.target``; NaN where a set's
    truth is unknown), each set's rows consecutive and ``rows_per_set`` of them, ``row_ids`` [rows, id columns]
    (what names each row within its set: ``OutputLevel.row_ids``); each set's ``num_elements`` and, where the sets
    carry them, its order ``invariants`` [sets, K] (what the training range is judged on)."""

    sets: list[int]
    kinds: list[str]
    outputs: torch.Tensor
    targets: torch.Tensor
    num_elements: list[int] = field(default_factory=list)
    invariants: torch.Tensor | None = None
    rows_per_set: list[int] = field(default_factory=list)
    row_ids: torch.Tensor | None = None

    @classmethod
    def from_batches(cls, batches: Batches, sets: Sequence[int], task: Task) -> "Predictions":
        """``batches`` of the sets ``sets``, in that order (a loader over them, not shuffled)."""
        level = task.level
        outputs, targets, kinds, sizes, invariants, rows, ids = [], [], [], [], [], [], []
        for output, target, batch in batches:
            outputs.append(output.cpu())
            targets.append(target.cpu())
            kinds += kinds_of(batch, target, task)
            sizes += torch.bincount(batch.batch.cpu(), minlength=batch.num_graphs).tolist()
            rows += torch.bincount(level.row_graphs(batch).cpu(), minlength=batch.num_graphs).tolist()
            ids.append(level.row_ids(batch).cpu())
            if "invariants" in batch:
                invariants.append(batch.invariants.cpu().double().reshape(batch.num_graphs, -1))
        if not outputs:  # a rank with no sets (more processes than sets)
            return cls([], [], torch.zeros(0, task.output_width), task.target(torch.zeros(0)),
                       row_ids=torch.zeros(0, len(level.id_columns), dtype=torch.long))
        return cls(list(sets), kinds, torch.cat(outputs), torch.cat(targets), sizes,
                   torch.cat(invariants) if len(invariants) == len(outputs) else None, rows, torch.cat(ids))

    @classmethod
    def merged(cls, parts: Sequence["Predictions"]) -> "Predictions":
        """Every rank's part, in the data's order (each set's rows kept together)."""
        sets = [index for part in parts for index in part.sets]
        order = sorted(range(len(sets)), key=sets.__getitem__)
        counts = [n for part in parts for n in part.rows_per_set]
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        rows = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in order]) if order else torch.zeros(0).long()
        kinds = [kind for part in parts for kind in part.kinds]
        outputs, targets = torch.cat([p.outputs for p in parts]), torch.cat([p.targets for p in parts])
        sizes = [n for part in parts for n in part.num_elements]
        invariant_rows = [p.invariants for p in parts if p.sets]
        invariants = (torch.cat(invariant_rows)[order] if invariant_rows and all(r is not None for r in invariant_rows)
                      else None)
        return cls([sets[i] for i in order], [kinds[i] for i in order], outputs[rows], targets[rows],
                   [sizes[i] for i in order], invariants, [counts[i] for i in order],
                   torch.cat([p.row_ids for p in parts])[rows])

    def set_of_rows(self) -> torch.Tensor:
        """Each row's set, as its position in ``sets``."""
        return torch.repeat_interleave(torch.arange(len(self.sets)), torch.tensor(self.rows_per_set, dtype=torch.long))

    def labelled(self) -> torch.Tensor:
        """Whether each set's truth is known (no NaN in its targets: ``missing_labels="unknown"``)."""
        if not self.targets.is_floating_point():
            return torch.ones(len(self.sets), dtype=torch.bool)
        unknown = torch.isnan(self.targets.reshape(self.targets.size(0), -1)).any(dim=1).double()
        return torch.zeros(len(self.sets), dtype=torch.float64).index_add_(0, self.set_of_rows(), unknown) == 0

    def subset(self, keep: torch.Tensor) -> "Predictions":
        """The sets where ``keep`` (bool per set) holds, with their rows."""
        positions = torch.nonzero(keep).view(-1).tolist()
        rows = keep[self.set_of_rows()]
        return Predictions([self.sets[i] for i in positions], [self.kinds[i] for i in positions], self.outputs[rows],
                           self.targets[rows], [self.num_elements[i] for i in positions] if self.num_elements else [],
                           self.invariants[keep] if self.invariants is not None else None,
                           [self.rows_per_set[i] for i in positions], self.row_ids[rows])

    def metrics(self, task: Task, criterion: Callable) -> dict[str, Any]:
        """The task's metrics over the sets whose truth is known (as the run's test reports them, its loss the mean
        over all of them), with ``unit`` (what a row is about), ``scored_sets``, ``rows`` and ``unlabelled_sets``
        (scored, truth unknown). Per kind, for one row per set: sets and recall (classification) or mean absolute
        error (regression), the F1 of each class (by name) and their mean weighted by support with the task's
        metrics, from the confusion matrix; for rows per element: the task's metrics per kind and the share of its
        rows predicted positive (``marked_share``), labels or not. A metric that the sets cannot define (a precision
        without any set predicted positive, the F1 of a class with no set, neither true nor predicted, every metric
        where no set records its truth) is None, and ``undefined`` says why (``evaluation.undefined``)."""
        level, labelled = task.level, self.labelled()
        counted = {"unit": level.unit, "scored_sets": len(self.sets), "rows": int(self.outputs.size(0)),
                   "unlabelled_sets": int((~labelled).sum())}
        measured = self if bool(labelled.all()) else self.subset(labelled)
        if not measured.sets:
            undefined = unlabelled_metrics(task, level.unit)
            return {**{name: None for name in task.metric_names}, "count": 0, **counted,
                    **({"per_kind": self._per_kind_of_rows(task, criterion)} if level.unit != "set" else
                       {"per_kind": {kind: {"sets": n} for kind, n in sorted(Counter(self.kinds).items())}}),
                    "undefined": undefined}
        if level.unit != "set":
            result = measured._task_metrics(task, criterion)
            undefined = task.undefined(result)
            return {**with_undefined_as_none(result, undefined), **counted,
                    "per_kind": self._per_kind_of_rows(task, criterion), "undefined": undefined}
        return {**measured._set_metrics(task, criterion), **counted}

    def _task_metrics(self, task: Task, criterion: Callable) -> dict[str, Any]:
        """``task.metrics`` of every row at once, totalled per set as the run's evaluation totals them."""
        loss = criterion(self.outputs, self.targets)
        return task.metrics(task.batch_totals(self.outputs, self.targets, loss, self.set_of_rows()))

    def _per_kind_of_rows(self, task: Task, criterion: Callable) -> dict[str, dict[str, Any]]:
        """Per kind (sorted by name): its sets, the share of its rows predicted positive, and the task's metrics
        (but the loss) over those of its sets whose truth is known (None where none is, or where undefined)."""
        found, labelled = {}, self.labelled()
        for kind in sorted(set(self.kinds)):
            of_kind = torch.tensor([k == kind for k in self.kinds])
            part, measured = self.subset(of_kind), self.subset(of_kind & labelled)
            result = measured._task_metrics(task, criterion) if measured.sets else {}
            result = with_undefined_as_none(result, task.undefined(result)) if result else {}
            shown = {name: result.get(name) for name in task.metric_names if name != "loss"}
            found[kind] = {"sets": len(part.sets), **shown,
                           "marked_share": float(task.predict(part.outputs).double().mean())}
        return found

    def metrics_by_size(self, task: Task, criterion: Callable, sizes: Sequence[int | None]
                        ) -> dict[str, dict[str, Any]]:
        """The task's metrics (but the loss) over the sets whose truth is known, in bins of their defect's size
        (``sizes``, one per set, e.g. a merged set's ``block_size``; None for a set without one): powers of two,
        ``4-7``, ``8-15``, ..., so that sizes drawn as 4, 8, 16, ... fill one bin each."""
        known = self.labelled() & torch.tensor([size is not None and size > 0 for size in sizes], dtype=torch.bool)
        bins = [int(size).bit_length() - 1 if size else -1 for size in sizes]
        found = {}
        for low in sorted({bins[i] for i in torch.nonzero(known).view(-1).tolist()}):
            part = self.subset(known & torch.tensor([b == low for b in bins], dtype=torch.bool))
            result = part._task_metrics(task, criterion)
            result = with_undefined_as_none(result, task.undefined(result))
            found[f"{2 ** low}-{2 ** (low + 1) - 1}"] = {
                "sets": len(part.sets), **{name: result[name] for name in task.metric_names if name != "loss"}}
        return found

    def _set_metrics(self, task: Task, criterion: Callable) -> dict[str, Any]:
        """The metrics of a task with one row per set (see ``metrics``)."""
        totals = task.batch_totals(self.outputs, self.targets, criterion(self.outputs, self.targets))
        result = task.metrics(totals)
        if not isinstance(task, ClassificationTask):
            errors = (self.outputs.double().view(-1) - self.targets.double().view(-1)).abs().tolist()
            return {**result, "per_kind": mean_by_kind(self.kinds, errors, "mae"),
                    "undefined": task.undefined(result)}
        true, predicted = self.targets.view(-1).long().tolist(), task.predict(self.outputs).tolist()
        correct = [float(t == p) for t, p in zip(true, predicted)]
        positive = task.positive_scores(self.outputs)
        positive = positive.numpy() if positive is not None else None
        ranking = classification_metrics(np.array(true, dtype=np.int64), np.array(predicted, dtype=np.int64),
                                         task.num_classes, positive) if true else {}
        undefined = task.undefined(result)
        result = {**result, "per_class_f1": dict(zip(task.class_names, result["per_class_f1"])),
                  **{key: ranking[key] for key in ("balanced_accuracy", "roc_auc") if key in ranking},
                  "per_kind": recall_by_kind(self.kinds, correct)}
        return {**with_undefined_as_none(result, undefined), "undefined": undefined}

    def constant_prediction(self, task: Task) -> str | None:
        """The class a classifier predicted for every set, if it predicted one only (None otherwise)."""
        if not isinstance(task, ClassificationTask) or not self.sets:
            return None
        predicted = set(task.predict(self.outputs).tolist())
        return task.class_names[predicted.pop()] if len(predicted) == 1 else None

    def rows(self, task: Task, describe_set: Callable[[int], dict[str, Any]],
             outside: list[list[str]] | None = None,
             parameters: Callable[[int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """One row per output row (per set, per element of each set, or per pair of elements that is marked or truly
        changed: ``tasks.levels``): what identifies its set
        (``describe_set(index)``: its index in the data, and for a store's sets the store and group), what names
        the row within its set (``element``: its element, row and column of the set's ``adj``; ``from_element`` and
        ``to_element`` for a pair), the set's kind and
        ``num_elements``, the ``truth`` (left out where the set's truth is unknown: scores only) and the score: the
        probability of the positive class and the prediction (binary, per set or per element), the predicted
        class and its probability (multiclass), the predicted value (regression); ``outside_training_range``:
        what of the set lies outside the range the run was trained on (``outside``: names per set; empty inside
        it, ``unknown`` for a run that does not record it); then the set's own parameters where the data records
        them (``parameters(index)``: a store's ``describe``)."""
        level = task.level
        kept = level.kept_rows(task, self.outputs, self.targets)  # all rows, but for pairs
        scored, row_ids = task.scored_rows(self.outputs[kept], self.targets[kept]), self.row_ids[kept].tolist()
        flags = [";".join(names) for names in outside] if outside is not None else ["unknown"] * len(self.sets)
        sizes = self.num_elements or [None] * len(self.sets)
        kept_per_set = torch.zeros(len(self.sets), dtype=torch.long).index_add_(0, self.set_of_rows(), kept.long())
        found, start = [], 0
        for position, index in enumerate(self.sets):
            ids = describe_set(index)
            of_set = {"kind": self.kinds[position], "num_elements": sizes[position]}
            after = {"outside_training_range": flags[position], **(parameters(index) if parameters else {})}
            for row in range(start, start + int(kept_per_set[position])):
                found.append({**ids, **dict(zip(level.id_columns, row_ids[row])), **of_set, **scored[row], **after})
            start += int(kept_per_set[position])
        return found


def write_predictions(csv_path: Path, rows: list[dict[str, Any]], json_path: Path, metrics: dict[str, Any]) -> None:
    """The rows as a CSV and the metrics as JSON, each written whole or not at all (``files.atomic_replace``)."""
    columns = _columns(rows)

    def write_csv(tmp: str) -> None:
        with open(tmp, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=columns)
            writer.writeheader()
            writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)

    atomic_replace(csv_path, write_csv)
    atomic_write_text(json_path, json.dumps(metrics, indent=2) + "\n")


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every row's keys, each where its rows put it: a key that earlier rows lack (the truth of a labelled set after
    sets without one, a parameter of another kind) goes right after the key it follows in its row."""
    columns: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for keys in (tuple(row) for row in rows):
        if keys in seen:
            continue
        seen.add(keys)
        for position, key in enumerate(keys):
            if key not in columns:
                columns.insert(columns.index(keys[position - 1]) + 1 if position else 0, key)
    return columns or ["set"]


def _cell(value: Any) -> Any:
    """A CSV cell: lists and mappings (a set's recorded parameters) as JSON, the rest as they are."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def describe_evaluation(result: dict[str, Any]) -> str:
    """The short table the command line prints: the task's metrics, F1 per class, then each kind's sets and recall
    (or mean absolute error; for rows per element, the task's metrics and the share of elements marked), the
    detection thresholds with how to read them, what is undefined and why, the notes (sets outside the training
    range, sets closed or left out, sets whose truth is unknown), and where the files are."""
    shown = [m for m in task_class(result["task"]).reports if m != "loss"]
    scores = "  ".join(f"{m} {_number(result[m])}" for m in shown)
    ranking = [m for m in ("balanced_accuracy", "roc_auc") if m in result]
    scores += "".join(f"  {m} {_number(result[m])}" for m in ranking)
    unit = result.get("unit", "set")
    scored = f"{result.get('scored_sets', result['count'])} causal sets"
    scored += f", {result['rows']} {unit}s" if unit != "set" else ""
    lines = ["", f"=== {result['run']} applied to {result['data_name']} ({scored}) ===",
             f"{scores}  (loss {_number(result['loss'], 4)})"]
    width = max(len(name) for name in [*result.get("per_class_f1", {}), *result["per_kind"], "class"]) + 2
    if "per_class_f1" in result:
        lines += [f"{'class':<{width}}{'F1':>8}"]
        lines += [f"{name:<{width}}{_number(f1):>8}" for name, f1 in result["per_class_f1"].items()]
    lines += _per_kind_table(result["per_kind"], width)
    for key in (key for key in result if key.startswith("by_") and key != "by_defect_size"):
        lines += _per_kind_table(result[key], width, key.removeprefix("by_"))
    lines += describe_thresholds(result)
    lines += _undefined_lines(result.get("undefined", {}))
    lines += [f"note: {note}" for note in result.get("notes", [])]
    lines += [f"predictions     {result['predictions_csv']}", f"metrics         {result['metrics_json']}"]
    return "\n".join(lines)


def _per_kind_table(per_kind: dict[str, dict[str, Any]], width: int, label: str = "kind") -> list[str]:
    """Each kind's (or size bin's, ``label``) sets and measures (the columns its rows hold), the recall's 95 %
    interval where there is one."""
    first = next(iter(per_kind.values()), {})
    columns = [key for key in first if key not in ("sets", "correct", "recall_low", "recall_high")]
    interval = "recall_low" in first
    widths = {name: max([len(name) + 2, 8, *(len(_number(row[name])) + 2 for row in per_kind.values())])
              for name in columns}
    lines = [f"{label:<{width}}{'sets':>8}" + "".join(f"{name:>{widths[name]}}" for name in columns)
             + ("  95% interval" if interval else "")]
    for kind, row in per_kind.items():
        lines.append(f"{kind:<{width}}{row['sets']:>8}"
                     + "".join(f"{_number(row[name]):>{widths[name]}}" for name in columns)
                     + (f"  {row['recall_low']:.3f}-{row['recall_high']:.3f}" if interval else ""))
    return lines


def _undefined_lines(undefined: dict[str, str]) -> list[str]:
    """One line per reason, naming every metric it leaves undefined."""
    by_reason: dict[str, list[str]] = {}
    for name, why in undefined.items():
        by_reason.setdefault(why, []).append(name)
    return [f"undefined: {', '.join(names)}: {why}" for why, names in by_reason.items()]


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


def _number(value: float | None, digits: int = 3) -> str:
    return "undefined" if value is None else f"{value:.{digits}f}"
