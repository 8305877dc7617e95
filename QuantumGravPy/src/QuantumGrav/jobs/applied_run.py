"""A trained run applied to new data: ``QG.load_run(run_dir)`` and ``python -m QuantumGrav evaluate``.

The run's best checkpoint (``checkpoints/best.pt``, the weights its test evaluated) holds the config that trained
them and what the model was built for (``model_io``: node features in, the task and its classes out), so the model
is rebuilt as training built it (``build_model``) without the training data. The new data (``applied_data``) is read
as the run read its own (its edges, target and classes) and checked against it first.

A run of any task applies: one output per set (multiclass, binary, regression), per element (``node_binary``,
``configs/inserted_block.yaml``) or per pair of elements (``relation_binary``, ``configs/toggled_relations.yaml``);
``tasks.levels`` says which, and the predictions CSV has one row per output (for pairs: those marked or
truly changed), its set's columns on every row. Where the data records no truth of a set (QuantumGrav.jl's stores hold no
``node_labels``), the set is scored and left out of the metrics (``applied_data``).

On one process or N: each rank predicts its shard of the sets (rank r: the r-th, (r + N)-th, ...), the predictions
are gathered to rank 0, and rank 0 computes every metric from all of them in the data's order and writes the files
(``evaluation.predictions``), so N processes give exactly the metrics of one. ``evaluate(..., nproc=N)`` starts N
workers as ``QG.launch`` does (``launcher.launch_processes``); under torchrun every rank runs
``evaluate_from_entry_point``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from ..config.schema import ResolvedConfig, load_config
from ..config.yaml_io import load_yaml_text
from ..config.layout import ConfigSections
from ..distributed.environment import launched_by_torchrun, resolve_device
from ..distributed.lifeline import stop_when_the_agent_dies
from ..distributed.runtime import Runtime
from ..common.errors import ConfigError, UserError
from ..evaluation.evaluator import Evaluator
from ..evaluation.predictions import Predictions, write_predictions
from ..tasks.classification import ClassificationTask
from ..tasks.registry import build_criterion, model_io, task_of_model_io
from ..runs.artifacts import CHECKPOINT_DIR
from ..runs.checkpoint_files import load_best_checkpoint
from ..training.loaders import load_run_data, make_loader
from ..training.model_builder import build_configured_model, check_model_forward
from ..training.optimization import autocast
from ..data.sources import data_notes
from ..data.training_range import describe_outside, outside_training_range
from ..common.logging_utils import get_logger
from ..common.processes import check_main_guard
from .applied_data import AppliedData, DataPaths, open_data
from .entry import run_in_group
from .launcher import launch_processes


logger = get_logger("evaluate")
OUT_OF_RANGE = ("flag", "refuse")  # what evaluate does with sets outside the range the run was trained on


def load_run(run_dir: str | os.PathLike) -> "AppliedRun":
    """A trained run's model, rebuilt from its best checkpoint, to evaluate on new data or predict with.

    Args:
        run_dir: a run directory that training wrote (``training.path``/``training.run_name``), holding
            ``checkpoints/best.pt``.

    Returns:
        An ``AppliedRun``: ``evaluate(data)`` (the run's metrics on ``data``, per class and per kind of causal set,
        and a predictions CSV) and ``predict(data)`` (one row per set, or per element for a node run).

    Raises:
        UserError: no such run directory, or no loadable ``best.pt`` in it (the message names what is there).
        ConfigError: the config stored in the checkpoint is refused.

    Example:
        >>> import QuantumGrav as QG
        >>> run = QG.load_run("runs/first")  # doctest: +SKIP
        >>> metrics = run.evaluate("path/to/stores")  # a QuantumGrav.jl store, a folder of them, or a config  # doctest: +SKIP
        >>> metrics["accuracy"], metrics["per_kind"]["polynomial"]["recall"]  # doctest: +SKIP
        >>> rows = run.predict("configs/train.yaml", split="test")  # doctest: +SKIP
        >>> node_run = QG.load_run("runs/inserted_block")  # a node task: one row per element  # doctest: +SKIP
        >>> node_run.evaluate("path/to/julia_stores")["undefined"]  # no block recorded: scores only  # doctest: +SKIP
    """
    return AppliedRun(*read_run(run_dir))


def read_run(run_dir: str | os.PathLike) -> tuple[Path, dict[str, Any], ResolvedConfig]:
    """The run directory, its best checkpoint and the config that trained it (validated, as a resume reads it)."""
    run_dir = Path(run_dir).expanduser()
    if not run_dir.is_dir():
        raise UserError(f"run '{run_dir}': no such folder; pass a run directory that train wrote "
                        "(training.path/<run name>, e.g. runs/first)")
    if not (run_dir / CHECKPOINT_DIR).is_dir() and not (run_dir / "config.yaml").is_file():
        raise UserError(f"run '{run_dir}' is not a run directory (no config.yaml, no {CHECKPOINT_DIR}/); pass one "
                        "that train wrote, e.g. runs/first")
    checkpoint = load_best_checkpoint(run_dir)
    try:
        config = load_config(load_yaml_text(checkpoint["config_yaml"]))
    except ConfigError as err:
        raise ConfigError(f"run '{run_dir}': the config stored in its best.pt is refused; {err}") from None
    return run_dir, checkpoint, config


class AppliedRun:
    """A trained run's model, rebuilt from its best checkpoint (``load_run``), on this process's device (in a
    process group: its rank's).

    Attributes:
        run_dir: the run directory.
        config: the config that trained the checkpoint's weights.
        task: the run's task (its type, classes and metrics).
        model: the model, in eval mode, with the best epoch's weights.
    """

    def __init__(self, run_dir: Path, checkpoint: dict[str, Any], config: ResolvedConfig):
        self.run_dir, self.config = run_dir, config
        self.sections = s = config.sections
        self.runtime = (Runtime.in_process_group(s.loop.device) if dist.is_available() and dist.is_initialized()
                        else Runtime(device=resolve_device(s.loop.device)))
        recorded = checkpoint.get("model_io") or _model_io_of_the_runs_data(s, self.runtime)
        self.in_channels = recorded["in_channels"]
        self.task = task_of_model_io(recorded, s.task.threshold)
        # The readout as training chose it (model.readout: auto is per element for a node task).
        self.model = build_configured_model(s.model, self.in_channels, self.task)
        self.model.load_state_dict(checkpoint["model"])
        self.model.to(self.runtime.device).eval()
        self.criterion = build_criterion(s.task.criterion, self.task, self.runtime.device)
        # The training split's range of N and of the head's invariants; None for a best.pt written before it was
        # recorded (its sets are then not judged against it).
        self.training_range: dict[str, Any] | None = checkpoint.get("training_range")

    def evaluate(self, data: DataPaths, *, split: str = "all", out: str | os.PathLike | None = None,
                 nproc: int = 1, store_options: dict[str, Any] | None = None,
                 out_of_range: str = "flag") -> dict[str, Any] | None:
        """The run's metrics on ``data``, written with every set's prediction (every element's, for a node run).

        Args:
            data: a YAML config (its ``data:`` section is built as training builds it) or QuantumGrav.jl stores
                and folders of stores (a path or a list).
            split: ``all`` sets, or the ``test`` part of the split training would make of the data.
            out: the predictions CSV (one row per set, or per element: ``Predictions.rows``); ``metrics.json`` goes
                beside it. None:
                ``<run_dir>/evaluations/<data name>/predictions.csv``.
            nproc: processes, each predicting a shard (ignored inside a process group: its ranks share the work).
            store_options: how QuantumGrav.jl stores are read (``applied_data.STORE_OPTIONS``: ``max_elements``,
                ``not_partial_orders``, ``cache``, ``cache_dir``, as ``QuantumGravJLDataset`` takes them); by default
                as the run read its own stores (its ``data.kwargs``), else the reader's defaults.
            out_of_range: what to do with sets outside the range of N and of the head's invariants that the run was
                trained on (``training_range``): ``flag`` them (the CSV's ``outside_training_range``, a count and a
                note in the result, a warning in the log) or ``refuse`` to evaluate (one UserError, nothing written).

        Returns:
            On rank 0: the task's metrics over the sets whose truth the data records (``accuracy``, ...; ``loss``,
            ``count``; None where the sets cannot define one, every one where no set records its truth,
            ``undefined`` saying why), ``unit`` (``set`` or ``element``: what a CSV row is about), ``scored_sets``,
            ``rows`` and ``unlabelled_sets`` (scored without truth), for classification ``confusion``,
            ``weighted_f1`` and ``per_class_f1``, for a node run the node task's (``iou``, ``block_sets``,
            ``blockless_sets_marked``, ``nodes``, ``confusion``: as its test computes them), per kind the same
            with ``marked_share``, and ``by_block_size`` (the same in bins of the block's size),
            ``per_kind`` (sets and recall, or mean absolute error, of each kind of causal set), for sets that
            describe their defect ``by_defect_size`` (recall against each defect's size), ``constant_prediction``
            (the one class predicted for every set, if so), ``outside_training_range`` (the count of sets outside
            ``training_range``; None if the run does not record it), ``notes`` and the files' paths. None on the
            other ranks.

        Raises:
            UserError: data that does not exist or does not fit the run (another task, other classes, other node
                features), ``out`` a folder, or ``nproc`` below 1.
        """
        if nproc < 1:
            raise UserError(f"nproc: expected an integer >= 1, got {nproc}")
        self._check_out_of_range(out_of_range)
        if out is not None and Path(out).is_dir():
            raise UserError(f"out: {out} is a folder; give the predictions CSV's path, e.g. {Path(out) / 'predictions.csv'}")
        if nproc > 1 and not self.runtime.distributed:
            check_main_guard("AppliedRun.evaluate")
            self._open(data, split, store_options)  # bad input is one line here, before any worker starts
            return launch_processes(self.config, nproc, Evaluation(str(self.run_dir), data, split, out, store_options,
                                                                   out_of_range))
        applied, predictions = self._predictions(data, split, store_options)
        if predictions is None:
            return None
        csv_path = Path(out) if out is not None else self.run_dir / "evaluations" / applied.name / "predictions.csv"
        outside, range_notes = self._judge_range(predictions, out_of_range)
        result = self._result(data, split, applied, predictions, outside, range_notes, csv_path)
        rows = predictions.rows(self.task, applied.describe_set, outside, applied.set_parameters)
        write_predictions(csv_path, rows, Path(result["metrics_json"]), result)
        return result

    def _result(self, data: DataPaths, split: str, applied: AppliedData, predictions: Predictions,
                outside: list[list[str]] | None, range_notes: list[str], csv_path: Path) -> dict[str, Any]:
        """What ``evaluate`` returns and writes as ``metrics.json`` (beside ``csv_path``)."""
        given = [data] if isinstance(data, (str, os.PathLike)) else list(data)
        return {"run": str(self.run_dir), "data": [str(path) for path in given], "data_name": applied.name,
                "split": split, "task": self.task.type, **predictions.metrics(self.task, self.criterion),
                **self._by_defect_size(applied, predictions), **self._by_size_of_defect(applied, predictions),
                "constant_prediction": predictions.constant_prediction(self.task),
                "outside_training_range": sum(bool(names) for names in outside) if outside is not None else None,
                "training_range": self.training_range, "notes": [*range_notes, *data_notes(applied.dataset)],
                "predictions_csv": str(csv_path), "metrics_json": str(csv_path.parent / "metrics.json")}

    def predict(self, data: DataPaths, *, split: str = "all", store_options: dict[str, Any] | None = None,
                out_of_range: str = "flag") -> list[dict[str, Any]] | None:
        """One row per set of ``data`` (as ``evaluate`` takes it and judges it against the training range), or per
        element of each set for a node run, in the data's order: ``set`` (its index; for stores also ``store`` and
        ``group``), for a node run ``element``, ``kind``, ``num_elements``, ``truth`` (absent where the data records
        none), and ``score``: the probability of the positive class and the ``predicted`` class (binary, per set or
        per element), the predicted class and its probability (multiclass), the value (regression);
        ``outside_training_range`` (what of the set lies outside it, empty inside, ``unknown`` for a run that does
        not record it); then the parameters a store records of the set (its defect's). None on ranks other than
        0."""
        self._check_out_of_range(out_of_range)
        applied, predictions = self._predictions(data, split, store_options)
        if predictions is None:
            return None
        outside, _ = self._judge_range(predictions, out_of_range)
        return predictions.rows(self.task, applied.describe_set, outside, applied.set_parameters)

    @staticmethod
    def _check_out_of_range(out_of_range: str) -> None:
        if out_of_range not in OUT_OF_RANGE:
            raise UserError(f"out_of_range: expected one of {OUT_OF_RANGE}, got {out_of_range!r}")

    def _judge_range(self, predictions: Predictions, out_of_range: str) -> tuple[list[list[str]] | None, list[str]]:
        """What of each set lies outside ``training_range`` (None when the run does not record it), and the notes
        to show; under ``refuse``, one UserError instead if any set does (or the range is not recorded)."""
        if self.training_range is None:
            note = (f"run '{self.run_dir}': its best.pt records no training range (written before QuantumGrav "
                    f"recorded one), so the sets are not judged against the range the run was trained on")
            if out_of_range == "refuse":
                raise UserError(f"{note}; evaluate with out_of_range flag (--out-of-range flag), or retrain the run")
            return None, [note]
        outside = outside_training_range(self.training_range, predictions.num_elements, predictions.invariants)
        line = describe_outside(outside, self.training_range)
        if line is None:
            return outside, []
        if out_of_range == "refuse":
            raise UserError(f"run '{self.run_dir}': {line}; nothing was written. Evaluate them flagged with "
                            f"out_of_range flag (--out-of-range flag), or apply a run trained on sets like them")
        logger.warning(line)
        return outside, [line]

    def _by_defect_size(self, applied: AppliedData, predictions: Predictions) -> dict[str, Any]:
        """For a classifier on sets that describe their defect (``KindsDataset``'s): the recall against each
        defect's size and the smallest defect recognised at 90 % recall (``analyses.kind_breakdown``); else nothing."""
        if not isinstance(self.task, ClassificationTask) or not hasattr(applied.dataset, "describe"):
            return {}
        # An analysis: loaded here, for data that describe their sets, so that no other job loads it.
        from ..analyses.kind_breakdown import kind_breakdown

        correct = self.task.predict(predictions.outputs) == predictions.targets.view(-1).long()
        descriptions = [applied.dataset.describe(index) for index in predictions.sets]
        return {"by_defect_size": kind_breakdown(descriptions, {"model": correct.numpy()})["by_defect_size"]}

    def _by_size_of_defect(self, applied: AppliedData, predictions: Predictions) -> dict[str, Any]:
        """For a task that declares its sets' defect size (``Task.defect_size``: the node task's, a merged
        set's ``block_size``): ``by_<size>``, its metrics in bins of that size (``Predictions.metrics_by_size``)."""
        key = self.task.defect_size
        if key is None or applied.set_parameters is None:
            return {}
        sizes = [applied.set_parameters(index).get(key) for index in predictions.sets]
        if all(size is None for size in sizes):
            return {}
        return {f"by_{key}": predictions.metrics_by_size(self.task, self.criterion, sizes)}

    def _open(self, data: DataPaths, split: str, store_options: dict[str, Any] | None) -> AppliedData:
        applied = open_data(data, split, self.sections, self.task, self.in_channels, self.runtime, store_options)
        check_model_forward(self.model, applied.first, self.task, self.sections.model.as_mapping(),
                            self.runtime.device)
        return applied

    def _predictions(self, data: DataPaths, split: str,
                     store_options: dict[str, Any] | None) -> tuple[AppliedData, Predictions | None]:
        """This rank's shard predicted with the evaluation loop of training (``Evaluator.outputs``, the run's
        test batch size and autocast), gathered: every set's prediction on rank 0, None on the others."""
        applied, runtime = self._open(data, split, store_options), self.runtime
        shard = applied.indices[runtime.rank::runtime.world_size]
        loader = make_loader(applied.dataset, self.sections.loaders.testing, shard, runtime.device)
        evaluator = Evaluator(self.model, self.task, self.criterion, runtime, "sharded",
                              lambda: autocast(self.sections.loop.amp, runtime.device.type))
        shard_predictions = Predictions.from_batches(evaluator.outputs(loader), shard, self.task)
        gathered = runtime.gather_to_main(shard_predictions)
        return applied, Predictions.merged(gathered) if gathered is not None else None


def _model_io_of_the_runs_data(sections: ConfigSections, runtime: Runtime) -> dict[str, Any]:
    """For checkpoints written before they recorded ``model_io``: the run's own data, built as training built it,
    says what the model was built for."""
    data = load_run_data(sections, runtime)
    return model_io(data.first.x.size(1), data.task)


@dataclass(frozen=True)
class Evaluation:
    """What every rank of a multi-process evaluation runs (picklable: ``launch_processes`` hands it to each worker)."""

    run_dir: str
    data: Any
    split: str
    out: Any
    store_options: dict[str, Any] | None = None
    out_of_range: str = "flag"

    def __call__(self, config: ResolvedConfig, rank: int, *, report, run_dirs, console_level) -> dict[str, Any] | None:
        return run_in_group(config, rank, self.run, report=report, console_level=console_level)

    def run(self) -> dict[str, Any] | None:
        return load_run(self.run_dir).evaluate(self.data, split=self.split, out=self.out,
                                               store_options=self.store_options, out_of_range=self.out_of_range)


def evaluate_from_entry_point(run_dir: str | os.PathLike, data: DataPaths, *, split: str = "all",
                              out: str | os.PathLike | None = None, nproc: int = 1,
                              **options: Any) -> dict[str, Any] | None:
    """What the command line calls: this torchrun worker's share if torchrun started us (``nproc`` is then the
    job's), else ``load_run(run_dir).evaluate`` on ``nproc`` processes; ``options``: ``evaluate``'s others."""
    if not launched_by_torchrun():
        return load_run(run_dir).evaluate(data, split=split, out=out, nproc=nproc, **options)
    stop_when_the_agent_dies()
    run = read_run(run_dir)
    return run_in_group(run[2], int(os.environ["RANK"]),
                        lambda: AppliedRun(*run).evaluate(data, split=split, out=out, **options))
