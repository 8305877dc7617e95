"""YAML configs: the `!pyobject` loader, validation with key paths, overrides.

A config is a plain nested dict (the seeds index it as ``config["parallel"]["world_size"]``).
``load_config`` reads YAML (or takes a dict), applies ``section.key=value`` overrides,
checks every key against the schema below, fills defaults and returns the resolved dict.
Problems are reported as ``key.path: expected ..., got ...``, all of them in one ConfigError
(the checks that combine several keys run once every key is valid on its own).
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from ..errors import ConfigError
from .roles import ROLES
from .smoke_test import apply_smoke_test, cap_file_epochs
from ..models.tasks import EARLY_STOPPING_METRICS, TASK_TYPES, metric_mode

PYOBJECT_TAG = "!pyobject"


# --------------------------------------------------------------------------- !pyobject
@dataclass(frozen=True)
class UnresolvedPyObject:
    """A `!pyobject` path that did not import; validation reports it with its key path."""

    path: str
    reason: str


def resolve_pyobject(path: str) -> Any:
    """Import ``package.module.attr`` (attributes may be nested) and return the object."""
    parts = path.strip().split(".")
    if not all(p.isidentifier() for p in parts):
        raise ImportError(f"'{path}' is not a dotted Python path")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name and not (module_name == err.name or module_name.startswith(err.name + ".")):
                raise  # the module exists but one of *its* imports is missing
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module named '{parts[0]}'")


def _construct_pyobject(loader: yaml.Loader, node: yaml.Node) -> Any:
    path = loader.construct_scalar(node)
    try:
        return resolve_pyobject(path)
    except (ImportError, AttributeError) as err:
        return UnresolvedPyObject(path, str(err))


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor(PYOBJECT_TAG, _construct_pyobject)
# YAML 1.1 reads `lr: 1e-3` as the string '1e-3' (it wants a dot); read it as a float.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def get_loader() -> type[yaml.SafeLoader]:
    """The YAML loader that understands ``!pyobject dotted.path`` (a class or function to import).

    Returns:
        A ``yaml.SafeLoader`` subclass; use it for config files you trust (see the configuration reference,
        "Trust").

    Example:
        >>> import yaml, QuantumGrav as QG
        >>> yaml.load("optimizer: !pyobject torch.optim.AdamW", QG.get_loader())["optimizer"].__name__
        'AdamW'
    """
    return _Loader


def pyobject_path(obj: Any) -> str:
    """``torch.optim.AdamW`` -> 'torch.optim.adamw.AdamW' style dotted path of a class or function."""
    return f"{obj.__module__}.{obj.__qualname__}"


def _is_pyobject(value: Any) -> bool:
    return callable(value) and hasattr(value, "__qualname__") and hasattr(value, "__module__")


class _Dumper(yaml.SafeDumper):
    def represent_data(self, data: Any) -> yaml.Node:  # classes/functions -> !pyobject
        if _is_pyobject(data):
            return self.represent_scalar(PYOBJECT_TAG, pyobject_path(data))
        if isinstance(data, tuple):
            return self.represent_list(list(data))
        return super().represent_data(data)


def dump_config(config: Mapping[str, Any]) -> str:
    """Write a config as YAML text (what a run saves as ``config.yaml``).

    Args:
        config: a config, usually resolved by ``load_config``; classes and functions in it are written as
            ``!pyobject dotted.path``.

    Returns:
        The YAML text; ``yaml.load(text, QG.get_loader())`` reads the same values back.
    """
    return yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False, default_flow_style=None)


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, _Loader)


# --------------------------------------------------------------------------- field checks
class _Invalid(Exception):
    """Raised by a field check with 'expected ...' text; the caller adds the key path
    and, unless ``names_value`` (the text already says what was got), the value."""

    def __init__(self, message: str, names_value: bool = False):
        super().__init__(message)
        self.names_value = names_value


def _describe(value: Any) -> str:
    if isinstance(value, UnresolvedPyObject):
        return f"!pyobject {value.path} (cannot import: {value.reason})"
    if _is_pyobject(value):
        return f"!pyobject {pyobject_path(value)}"
    return repr(value) if not isinstance(value, (dict, list)) else f"{type(value).__name__} {value!r}"


@dataclass
class Field:
    """One config key: its default and a check that returns the normalised value."""

    check: Callable[[Any], Any]
    default: Any = None
    nullable: bool = False
    doc: str = ""

    def validate(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        return self.check(value)


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        bounds = _bounds_text(minimum, maximum)
        if (isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
                or (maximum is not None and value > maximum)):
            raise _Invalid(f"expected an integer{bounds}")
        return value

    return check


def number(minimum: float | None = None, maximum: float | None = None, *, exclusive_min: bool = False):
    def check(value: Any) -> float:
        lo = f" > {minimum}" if exclusive_min else (f" >= {minimum}" if minimum is not None else "")
        hi = f" <= {maximum}" if maximum is not None else ""
        text = f"expected a number{lo}{' and' if lo and hi else ''}{hi}"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise _Invalid(text)
        if minimum is not None and (value <= minimum if exclusive_min else value < minimum):
            raise _Invalid(text)
        if maximum is not None and value > maximum:
            raise _Invalid(text)
        return float(value)

    return check


def _bounds_text(minimum: Any, maximum: Any) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("expected true or false")
    return value


def string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid("expected a non-empty string")
    return value


def choice(*options: Any) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        # YAML reads a bare `off` as False; accept it where 'off' is an option.
        if value is False and "off" in options:
            return "off"
        # Type and value: YAML's 1 and 0 are not true and false, nor 2.0 the dimension 2.
        if not any(value == option and type(value) is type(option) for option in options):
            raise _Invalid(f"expected one of {', '.join(repr(o) for o in options)}")
        return value

    return check


def pyobject(value: Any) -> Any:
    if isinstance(value, UnresolvedPyObject):
        raise _Invalid(f"expected an importable Python object (!pyobject package.module.name); "
                       f"'{value.path}' does not import: {value.reason}", names_value=True)
    if not (isinstance(value, type) or inspect.isroutine(value)):
        # An instance (e.g. a loss object made in a module) cannot be written to the run's config.yaml.
        raise _Invalid("expected a Python class or function given as !pyobject package.module.name "
                       "(not an instance: name the class, and put its arguments in the config)")
    return value


def pyobject_of(role: str) -> Callable[[Any], Any]:
    """A ``!pyobject`` value of the role ``role`` (``roles.ROLES``): anything else is refused here, in
    validation, before anything the config names is called."""
    def check(value: Any) -> Any:
        value = pyobject(value)
        if not ROLES[role].admits(value):
            raise _Invalid(f"expected {ROLES[role].expected}, got {_describe(value)}{ROLES[role].explain(value)}",
                           names_value=True)
        return value

    return check


def callback_entry(value: Any) -> dict[str, Any]:
    """One item of ``callbacks:``: ``{type: !pyobject module.Class, kwargs: {...}}``, a QuantumGrav.Callback."""
    shape = "expected {type: !pyobject module.CallbackClass, kwargs: {...}}"
    if not isinstance(value, dict) or "type" not in value or set(value) - {"type", "kwargs"}:
        raise _Invalid(shape)
    cls = pyobject(value["type"])
    if not ROLES["callback"].admits(cls):
        raise _Invalid(f"{shape} whose type is {ROLES['callback'].expected}, got {_describe(cls)}", names_value=True)
    return {"type": cls, "kwargs": mapping(value.get("kwargs") or {})}


def list_of(item: Callable[[Any], Any], *, min_len: int = 0, length: int | None = None):
    def check(value: Any) -> list:
        what = f"a list of {length}" if length else "a list"
        if not isinstance(value, (list, tuple)) or len(value) < min_len or (length and len(value) != length):
            raise _Invalid(f"expected {what}{f' with at least {min_len} item(s)' if min_len else ''}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Invalid as err:
                got = "" if err.names_value else f", got {_describe(v)}"
                raise _Invalid(f"item {i}: {err}{got}", names_value=True) from None
        return out

    return check


def mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise _Invalid("expected a mapping (key: value pairs)")
    return dict(value)


def port(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)  # the seeds write master_port: "12355"
    return integer(1, 65535)(value)


def fraction_or_range(value: Any) -> float | list[float]:
    """A number in (0, 1], or a range [low, high] of them with low <= high."""
    fraction = number(0.0, 1.0, exclusive_min=True)
    if not isinstance(value, (list, tuple)):
        return fraction(value)
    low, high = list_of(fraction, length=2)(value)
    if low > high:
        raise _Invalid(f"expected a range [low, high] with low <= high, got {list(value)}")
    return [low, high]


# --------------------------------------------------------------------------- the schema
def _data_schema() -> dict[str, Field]:
    from ..data.dataset import DATA_DEFAULTS, VALID_CLASSES, VALID_EDGES, VALID_STORAGE, VALID_TARGETS

    d = DATA_DEFAULTS
    fraction = number(0.0, 1.0, exclusive_min=True)
    return {
        "root": Field(string, d["root"], doc="cache directory for generated data sets"),
        "num_samples": Field(integer(3), d["num_samples"], doc="causal sets generated (all splits)"),
        "n_min": Field(integer(4), d["n_min"], doc="elements per causal set, drawn uniformly from [n_min, n_max]"),
        "n_max": Field(integer(4), d["n_max"], doc="the largest causal sets (n_min <= n_max)"),
        "dimensions": Field(
            list_of(choice(2, 3, 4), min_len=1), list(d["dimensions"]), doc="Minkowski dimensions sprinkled into"
        ),
        "classes": Field(
            list_of(choice(*VALID_CLASSES), min_len=1),
            list(d["classes"]),
            doc="cset types generated: " + ", ".join(VALID_CLASSES),
        ),
        "destroy_fraction": Field(fraction_or_range, d["destroy_fraction"],
                                  doc="share of pairs flipped in destroyed sets, or a range [low, high] "
                                  "drawn from log-uniformly per set"),
        "edges": Field(choice(*VALID_EDGES), d["edges"], doc="graph edges: links (Hasse diagram) or all relations"),
        "target": Field(choice(*VALID_TARGETS), d["target"], doc="generator's y: " + ", ".join(VALID_TARGETS)
                        + " (multiclass, binary, multiclass, regression under task.type: auto)"),
        "seed": Field(integer(0), d["seed"], doc="generation seed (part of the cache key)"),
        "storage": Field(choice(*VALID_STORAGE), d["storage"],
                         doc="memory: every rank holds the generated sets; disk: it holds an index and reads each "
                             "set from the cache's shards when a batch needs it (memory flat in the data size)"),
        "workers": Field(integer(1), d["workers"], nullable=True,
                         doc="processes generating a missing cache, per rank (every rank makes a share of it); "
                             "null: this process's cores / processes on the node, or 1 for a data set that one process "
                             "makes in under 10 s (by estimate)"),
        "split": Field(list_of(fraction, length=3), list(d["split"]), doc="train, validation, test fractions"),
        "split_seed": Field(integer(0), d["split_seed"], doc="the same on every rank, never the rank"),
        "type": Field(pyobject_of("dataset"), None, nullable=True,
                      doc="your dataset class (a subclass of torch.utils.data.Dataset, such as PyG's Dataset or "
                          "InMemoryDataset, whose items have x, edge_index, y) or a function marked with "
                          "@QuantumGrav.dataset_factory that returns one (@QG.dataset_factory above def "
                          "my_sets(**kwargs): ..., then data.type: !pyobject my_module.my_sets), built as "
                          "type(**kwargs) on every rank, rank 0 first (docs/your_own_data.md); null: the built-in "
                          "generator (the keys above; split and split_seed apply to both)"),
        "kwargs": Field(mapping, {}, doc="keyword arguments of data.type"),
    }


def _wandb_schema() -> dict[str, Field]:
    from ..runs.wandb_logger import WANDB_DEFAULTS, WANDB_MODES

    d = WANDB_DEFAULTS
    return {
        "project": Field(string, d["project"], doc="W&B project of the run"),
        "name": Field(string, d["name"], nullable=True, doc="W&B run name; null: one W&B picks"),
        "entity": Field(string, d["entity"], nullable=True, doc="W&B user or team; null: your default entity"),
        "group": Field(string, d["group"], nullable=True, doc="W&B group of related runs (e.g. a sweep)"),
        "mode": Field(choice(*WANDB_MODES), d["mode"],
                      doc="offline: written under the run directory, to sync later (wandb sync); online: sent "
                          "as it runs; disabled: no W&B. The environment's WANDB_MODE, when one of these, wins"),
        "tags": Field(list_of(string), list(d["tags"]), doc="W&B tags of the run"),
        "watch": {
            "enabled": Field(boolean, d["watch"]["enabled"],
                             doc="log gradient (or parameter) histograms with wandb.watch"),
            "log": Field(choice("gradients", "parameters", "all"), d["watch"]["log"],
                         doc="what wandb.watch logs"),
            "log_freq": Field(integer(1), d["watch"]["log_freq"], doc="wandb.watch logs every N batches"),
        },
    }


def _loader_fields(batch_size: int, workers: int) -> dict[str, Field]:
    # No drop_last for validation and testing: every item counts, or the metrics are not exact.
    return {
        "batch_size": Field(integer(1), batch_size, doc="graphs per batch, per process"),
        "num_workers": Field(integer(0), workers, doc="DataLoader worker processes, per process"),
        "pin_memory": Field(boolean, False, doc="page-locked host memory for faster copies to a GPU; only helps "
                                                "with CUDA"),
        "prefetch_factor": Field(integer(1), None, nullable=True,
                                 doc="batches each worker loads ahead; null: PyTorch's default (2 with workers)"),
    }


def plain_name(value: Any) -> str:
    if not isinstance(value, str) or not value or "/" in value or "\\" in value or value in (".", ".."):
        raise _Invalid("expected a plain folder name (no '/', not '.' or '..')")
    return value


def schema() -> dict[str, Any]:
    """The full config schema: section -> key -> Field (nested dicts are sub-sections)."""
    training = {
        "seed": Field(
            integer(0), 42, doc="seeds weights and shuffling (the same on every rank) and dropout (per rank)"
        ),
        "device": Field(
            choice("auto", "cpu", "cuda"), "auto", doc="auto: CUDA when present; each process uses cuda:LOCAL_RANK"
        ),
        "path": Field(string, "runs", doc="parent folder of the run directories"),
        "run_name": Field(plain_name, None, nullable=True, doc="run directory name (null: run-<timestamp>-<random>)"),
        "num_epochs": Field(integer(1), 40, doc="upper bound; early stopping may end sooner"),
        **_loader_fields(32, 0),
        "batch_budget": {
            "nodes": Field(integer(1), None, nullable=True,
                           doc="batches by size instead of batch_size: at most this many nodes per batch, per "
                               "process (training, validation and testing); with edges, graphs or both"),
            "edges": Field(integer(1), None, nullable=True,
                           doc="at most this many edges per batch; similar sizes share a batch, every rank runs "
                               "the same number of steps and each step's batches hold about the same edges "
                               "(docs/large_data.md); a set larger than the budget is an error"),
            "graphs": Field(integer(1), None, nullable=True, doc="at most this many graphs per batch (null: any)"),
        },
        "preflight": Field(boolean, True,
                           doc="before training, run the largest batch once (forward and backward) and refuse to "
                               "start (exit 2) if its peak memory passes memory_limit_mb or the device's memory; "
                               "doctor --config prints the same estimate"),
        "drop_last": Field(boolean, False, doc="drop each epoch's incomplete last training batch"),
        "shuffle": Field(boolean, True, doc="reshuffle the training set every epoch (DistributedSampler.set_epoch)"),
        "optimizer_type": Field(
            pyobject_of("optimizer"),
            resolve_pyobject("torch.optim.AdamW"),
            doc="optimizer class (a subclass of torch.optim.Optimizer), built with (parameters, *optimizer_args, "
                "**optimizer_kwargs)",
        ),
        "optimizer_args": Field(list_of(lambda v: v), [], doc="positional arguments of the optimizer after the "
                                                              "parameters"),
        # The default job's optimizer (configs/train.yaml, the study's best): tests/test_config.py keeps them equal.
        "optimizer_kwargs": Field(
            mapping, {"lr": 4.46e-3, "weight_decay": 6.03e-6},
            doc="keyword arguments of the optimizer; lr is the base LR before lr_scaling (a config that sets "
                "optimizer_kwargs replaces the whole mapping: give lr and weight_decay together)"
        ),
        "scheduler_type": Field(
            pyobject_of("scheduler"), resolve_pyobject("torch.optim.lr_scheduler.CosineAnnealingLR"), nullable=True,
            doc="LR scheduler class (a subclass of torch.optim.lr_scheduler.LRScheduler, or ReduceLROnPlateau); "
                "null: a constant LR after the warmup. CosineAnnealingLR without T_max decays over the epochs "
                "after the warmup (and is re-planned when a resumed run changes num_epochs); ReduceLROnPlateau is "
                "stepped once per epoch with the early-stopping metric, in its mode (a scheduler_kwargs.mode that "
                "contradicts it is refused)"
        ),
        "scheduler_args": Field(list_of(lambda v: v), [], doc="positional arguments of the scheduler after the "
                                                              "optimizer"),
        "scheduler_kwargs": Field(mapping, {}, doc="keyword arguments of the scheduler, e.g. {T_max: 10} or "
                                                   "{step_size: 5, gamma: 0.5}"),
        "scheduler_interval": Field(
            choice("epoch", "step"), "epoch", doc="step the scheduler once per epoch or per optimizer step"
        ),
        "warmup_epochs": Field(integer(0), 0, doc="linear LR warmup before the schedule"),
        "lr_scaling": Field(
            choice("none", "linear", "sqrt"),
            "none",
            doc="scale lr and warmup with effective batch / reference_batch_size",
        ),
        "reference_batch_size": Field(
            integer(1), None, nullable=True, doc="the batch the LR was tuned for (null: batch_size)"
        ),
        "accumulation_steps": Field(integer(1), 1, doc="micro-batches per optimizer step (DDP syncs only on the last)"),
        "amp": Field(choice("off", "fp16", "bf16"), "off", doc="mixed precision; fp16 needs CUDA"),
        "flush_denormals": Field(
            boolean, True,
            doc="on the CPU, compute with floats below 1.18e-38 as zero (torch.set_flush_denormal, in every thread "
                "of the process): x86 CPUs are many times slower on such denormal floats, and training makes "
                "more of them every epoch (docs/stable_training.md); false: the process keeps its own setting (IEEE "
                "arithmetic unless your code changed it)"),
        "grad_clip_norm": Field(
            number(0.0, exclusive_min=True), None, nullable=True, doc="clip the global gradient norm to this value"
        ),
        "checkpoint_at": Field(integer(1), None, nullable=True, doc="also keep epoch_K.pt every K epochs"),
        "checkpoint_every_n_steps": Field(
            integer(1), None, nullable=True,
            doc="also checkpoint last.pt every N optimizer steps: a restart resumes mid-epoch at the next batch"),
        "memory_limit_mb": Field(
            number(0.0, exclusive_min=True), None, nullable=True,
            doc="warn once when RSS (or CUDA memory) passes it; the preflight refuses a largest batch "
                "whose peak would pass it"
        ),
        "log_every_n_steps": Field(
            integer(1), 50, doc="log loss, throughput and memory every N batches (and at each epoch end)"
        ),
        "progress_bar": Field(choice("auto", True, False), "auto", doc="auto: on rank 0 in a terminal, never under CI"),
        "figures": Field(boolean, True, doc="rank 0 draws figures/ (training curves, test plots) with matplotlib; "
                                            "false: none (sweeps, runs nobody looks at)"),
        "resume": Field(string, None, nullable=True,
                        doc="run directory to continue from its last checkpoint; the config's data, model and task "
                            "sections (and criterion) must be the run's, training settings such as num_epochs and "
                            "early_stopping.* may change (a changed early-stopping metric or mode starts its count "
                            "afresh). The LR schedule is restored from the checkpoint; when num_epochs changes and "
                            "the schedule's length follows it (CosineAnnealingLR without T_max), the cosine is "
                            "re-planned for the new length: from the resumed epoch on, the LR is the one a run "
                            "planned for the new num_epochs from the start has there, reaching eta_min at the new "
                            "end (a finished run extended by a few epochs continues at a small LR, not from zero; the "
                            "log says so). An explicit scheduler_kwargs.T_max is kept as it is"),
    }
    model = {
        "type": Field(pyobject_of("model"), None, nullable=True,
                      doc="your model class (a subclass of torch.nn.Module), built as type(in_channels, out_channels, "
                          "**model.kwargs); its forward(batch) gets a PyG Batch and returns [graphs, out_channels] "
                          "(the contract and an example: docs/your_own_data.md); the keys conv to graph_features "
                          "then do not apply. null: the built-in QuantumGrav.models.gnn.GNNClassifier"),
        # The built-in model's defaults are the default job's (configs/train.yaml, the study's best):
        # tests/test_config.py keeps them equal.
        "conv": Field(
            pyobject_of("convolution"),
            resolve_pyobject("QuantumGrav.models.sparse_attention.SparseTransformerConv"),
            doc="message-passing layer class (a subclass of torch.nn.Module), built as conv(in, out, **conv_kwargs): "
                "the default, QuantumGrav.models.sparse_attention.SparseTransformerConv, computes PyG's TransformerConv "
                "(same parameters, same state_dict) without [edges, heads, channels] tensors; PyG's own layers "
                "(TransformerConv, GraphConv, GCNConv, GINConv, GATv2Conv, SAGEConv) can be named instead",
        ),
        "conv_kwargs": Field(mapping, {"heads": 2, "concat": False},
                             doc="keyword arguments of every conv layer; the default is (Sparse)TransformerConv's (two "
                                 "attention heads, averaged): set it too when you change conv, e.g. "
                                 "--set model.conv_kwargs={} for GraphConv"),
        "hidden_channels": Field(
            list_of(integer(1), min_len=1), [128, 128, 128], doc="one message-passing layer per entry, its width"
        ),
        "norm": Field(choice("batch", "layer", "graph", "none"), "batch", doc="normalisation after each layer"),
        "activation": Field(choice("relu", "gelu", "elu", "tanh", "leaky_relu"), "relu",
                            doc="activation after each layer and in the head"),
        "dropout": Field(number(0.0, 0.99), 0.1, doc="dropout probability after each layer and in the head"),
        "pooling": Field(choice("mean", "max", "add", "mean_max"), "mean",
                         doc="per-graph readout of the node states (mean_max: both, concatenated)"),
        "head_hidden": Field(list_of(integer(1)), [64], doc="hidden widths of the classifier MLP"),
        "directions": Field(choice("forward", "both"), "both",
                            doc="forward: messages past -> future only; both: past -> future and future -> past, "
                                "with separate weights"),
        "graph_features": Field(boolean, True, doc="hybrid: the set's order invariants (data.invariants) "
                                "join the pooled node states in the head; items without invariants get them derived "
                                "from edge_index"),
        "kwargs": Field(mapping, {}, doc="extra constructor arguments of a custom model.type"),
    }
    return {
        "training": training,
        "model": model,
        "validation": {
            **_loader_fields(128, 0),
            "mode": Field(
                choice("sharded", "rank0"),
                "sharded",
                doc=("sharded: every rank evaluates a shard, sums reduced; rank0: rank 0 evaluates all; same numbers"),
            ),
            "recompute_batch_norm": Field(
                boolean, True,
                doc="before each validation, set every batch norm's statistics to those of the whole training set "
                    "at the current weights (one forward pass, sums over all ranks); false: the running averages "
                    "of the last batches, which swing with each batch's mix and made the validation loss jump"),
        },
        "testing": {
            **_loader_fields(128, 0),
            "baselines": Field(boolean, True, doc="fit the order-invariant baselines (scikit-learn) on the training "
                                                  "split and report them next to the test result (items without "
                                                  "invariants get them derived from edge_index); false: the model's "
                                                  "result alone"),
        },
        "task": {
            "type": Field(choice("auto", *TASK_TYPES), "auto",
                          doc="multiclass | binary | regression; auto: the dataset's task attribute (the generator's "
                              "follows data.target), else regression for float y, multiclass for integer y"),
            "threshold": Field(number(0.0, 1.0, exclusive_min=True), 0.5,
                               doc="binary: a graph is predicted positive when sigmoid(logit) >= threshold"),
        },
        "early_stopping": {
            "enabled": Field(boolean, True, doc="false: train all num_epochs"),
            "metric": Field(choice(*EARLY_STOPPING_METRICS), "val_loss",
                            doc="one the task reports: multiclass val_loss, val_accuracy; binary also val_precision, "
                                "val_recall, val_f1; regression val_loss, val_mae, val_rmse, val_r2"),
            "mode": Field(choice("min", "max"), None, nullable=True,
                          doc="default: max for accuracy, precision, recall, f1, r2; min for loss, mae, rmse"),
            "patience": Field(integer(1), 10, doc="epochs without improvement before the run stops"),
            "min_delta": Field(number(0.0), 0.0, doc="the least change of the metric that counts as an improvement"),
            "window": Field(integer(1), 3, doc="judge the metric's mean over the last window epochs, so that one "
                                               "lucky epoch is not the best one (the best epoch is the window's "
                                               "last); 1: each epoch alone"),
        },
        "criterion": Field(
            pyobject_of("loss"),
            None,
            nullable=True,
            doc="loss(outputs, target): a torch.nn.Module class (instantiated first), a function of "
                "torch.nn.functional, a function of your own code or one marked with @QuantumGrav.loss_function; "
                "null: the task's (cross_entropy, binary_cross_entropy_with_logits, mse_loss). Your own code is a "
                "module outside the Python installation: a script's or notebook's __main__, a .py file next to "
                "the notebook, a project on PYTHONPATH or installed in editable mode; not the standard library, "
                "not site-packages or dist-packages, not QuantumGrav itself. A function of an installed package "
                "(say torchvision.ops.sigmoid_focal_loss) is refused unless marked: wrap it in a function of your "
                "own module, or mark it where it is defined. The rule follows whoever wrote the function, as a "
                "config cannot: an allow-list in the config would be written by whoever writes the config, while "
                "the functions a hostile config would reach for (subprocess.run, os.system, shutil.rmtree, "
                "builtins.eval) are all of the standard library or installed packages",
        ),
        "data": _data_schema(),
        "callbacks": Field(list_of(callback_entry), [],
                           doc="your callbacks (QuantumGrav.Callback subclasses), each {type: !pyobject module.Class, "
                               "kwargs: {...}}, run after the built-in ones that decide and before those that write "
                               "(README, \"Callbacks\")"),
        "parallel": {
            "world_size": Field(integer(1), 1, doc="processes for QG.launch / --nproc (torchrun sets its own)"),
            "master_addr": Field(string, "localhost", doc="address of node 0"),
            "master_port": Field(port, None, nullable=True, doc="null: a free port is picked"),
            "backend": Field(choice("nccl", "gloo"), None, nullable=True, doc="null: nccl on CUDA, else gloo"),
            "timeout_s": Field(
                number(0.0, exclusive_min=True), 300.0, doc="collective timeout: a dead rank fails the job after this"
            ),
            "data_timeout_s": Field(
                number(0.0, exclusive_min=True), 3600.0, doc="how long ranks wait for each other to generate the data"
            ),
            "output_device": Field(integer(0), None, nullable=True, doc="null: this process's GPU (LOCAL_RANK)"),
            "find_unused_parameters": Field(
                boolean, False, doc="true only if some parameters get no gradient (slower)"
            ),
        },
        "logger": {"wandb": _wandb_schema()},
    }


OPTIONAL_SECTIONS = {"logger.wandb", "training.batch_budget"}
DERIVED_SECTION = "derived"  # absent (or null) means: feature off
STUDY_SECTION = "tune"  # a study config's own section (studies/config.py), which a training config does not have


# --------------------------------------------------------------------------- validation
def _walk(spec: Mapping[str, Any], given: Any, prefix: str, errors: list[str]) -> dict:
    if not isinstance(given, dict):
        errors.append(f"{prefix.rstrip('.') or 'config'}: expected a mapping (section), got {_describe(given)}")
        return {}
    for key in given:
        if key not in spec:
            hint = difflib.get_close_matches(str(key), list(spec), n=1)
            suggestion = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(spec)}"
            if f"{prefix}{key}" == STUDY_SECTION:  # a study config given to train
                suggestion = ("; this is a study config: run it with python -m QuantumGrav tune --config ... (or "
                              "QG.tune), or train one of its configurations (the study's best.yaml)")
            errors.append(f"{prefix}{key}: unknown key{suggestion}")
    resolved: dict[str, Any] = {}
    for key, item in spec.items():
        path = f"{prefix}{key}"
        if isinstance(item, dict):
            if path in OPTIONAL_SECTIONS and given.get(key) is None:
                resolved[key] = None
                continue
            resolved[key] = _walk(item, given.get(key, {}), path + ".", errors)
        elif key in given:
            try:
                resolved[key] = item.validate(given[key])
            except _Invalid as err:
                got = "" if err.names_value else f", got {_describe(given[key])}"
                errors.append(f"{path}: {err}{got}")
        else:
            resolved[key] = copy.deepcopy(item.default)
    return resolved


def _cross_checks(cfg: dict, errors: list[str]) -> None:
    """Checks that involve several keys (run once every key on its own is valid)."""
    data = cfg["data"]
    if data["n_min"] > data["n_max"]:
        errors.append(f"data.n_min: expected n_min <= n_max, got n_min={data['n_min']} > n_max={data['n_max']}")
    if abs(sum(data["split"]) - 1.0) > 1e-6:
        errors.append(f"data.split: expected three fractions that sum to 1, got {data['split']} "
                      f"(sum {sum(data['split']):.3f})")
    from ..data.causal_sets import MANIFOLD_CLASSES

    for cls in data["classes"]:
        if cls in MANIFOLD_CLASSES and MANIFOLD_CLASSES[cls] not in data["dimensions"]:
            errors.append(f"data.classes: '{cls}' needs dimension {MANIFOLD_CLASSES[cls]} in data.dimensions, "
                          f"got dimensions {data['dimensions']}; add it there or remove the class")
    es = cfg["early_stopping"]
    if es["mode"] is not None and es["mode"] != metric_mode(es["metric"]):
        # Always a mistake, often made by overriding the metric of an already resolved config.
        errors.append(f"early_stopping.mode: '{es['mode']}' but {es['metric']} improves towards "
                      f"'{metric_mode(es['metric'])}'; set mode to null (it then follows the metric)")
    budget = cfg["training"]["batch_budget"]
    if budget is not None and budget["nodes"] is None and budget["edges"] is None:
        errors.append(f"training.batch_budget: expected nodes, edges or both (a bound on the batch's size), got "
                      f"{budget}; for a fixed number of graphs per batch use training.batch_size instead")
    if budget is not None and cfg["training"]["lr_scaling"] != "none":
        errors.append(f"training.lr_scaling: '{cfg['training']['lr_scaling']}' scales the LR with the effective batch "
                      "size, which training.batch_budget does not fix (its batches hold different numbers of "
                      "graphs); set lr_scaling: none and the LR for the budget")
    if budget is not None and cfg["training"]["drop_last"]:
        errors.append("training.drop_last: batches packed by training.batch_budget have no incomplete last batch "
                      "to drop; set drop_last: false")
    lr = cfg["training"]["optimizer_kwargs"].get("lr")
    if lr is not None:
        try:
            number(0.0, exclusive_min=True)(lr)
        except _Invalid as err:
            errors.append(f"training.optimizer_kwargs.lr: {err}, got {_describe(lr)}")


def _fill_dependent_defaults(cfg: dict) -> None:
    es = cfg["early_stopping"]
    if es["mode"] is None:  # the direction in which the metric improves
        es["mode"] = metric_mode(es["metric"])


class ResolvedConfig(dict):
    """A config that ``validate_config`` accepted, every default filled in: a plain dict to read and index,
    which also remembers what it held when it was validated. The library validates a config once, where it
    enters (the CLI, ``QG.launch``, a trainer given a path or a raw dict); components that receive a
    ResolvedConfig trust it. One edited since (a notebook's ``config["training"]["num_epochs"] = 2``) is no
    longer trusted and is validated again where it enters next (``resolve_config``)."""

    def __init__(self, values: dict):
        super().__init__(values)
        self.validated_text = dump_config(self)

    def unchanged(self) -> bool:
        return dump_config(self) == self.validated_text


def with_world_size(config: ResolvedConfig, world_size: int) -> ResolvedConfig:
    """``config`` for a job of ``world_size`` processes (what a launcher knows better than the file): a
    copy that stays validated (an integer >= 1 is a valid ``parallel.world_size``)."""
    if config["parallel"]["world_size"] == world_size:
        return config
    changed = copy.deepcopy(dict(config))
    changed["parallel"] = {**changed["parallel"], "world_size": world_size}
    return ResolvedConfig(changed)


def resolve_config(config: Any) -> ResolvedConfig:
    """``config`` itself when it is a ResolvedConfig that nobody edited since, else ``load_config(config)``:
    what every entry point calls, so that a config is validated once per process."""
    if isinstance(config, ResolvedConfig) and config.unchanged():
        return config
    return load_config(config)


def validate_config(config: Any) -> ResolvedConfig:
    """Check a config against the schema and fill in every default.

    Args:
        config: a mapping of sections (``training``, ``model``, ...), as read from YAML.

    Returns:
        The resolved config (a ``ResolvedConfig``, a dict) with every key present.

    Raises:
        ConfigError: one line per problem, each naming the key path and what was expected, e.g.
            ``training.batch_size: expected an integer >= 1, got 0``.
    """
    errors: list[str] = []
    if not isinstance(config, dict):
        raise ConfigError(f"config: expected a mapping of sections, got {_describe(config)}")
    # A run's config.yaml records the values the trainer derived (scaled LR, effective batch)
    # under 'derived'; they are recomputed on every start, so reading them back drops them.
    config = {k: v for k, v in config.items() if k != DERIVED_SECTION}
    resolved = _walk(schema(), config, "", errors)
    if not errors:  # the keys that cross checks combine are only known to be valid now
        _cross_checks(resolved, errors)
    if errors:
        listing = "\n".join(f"  - {e}" for e in errors)
        raise ConfigError(f"invalid config ({len(errors)} problem{'s' * (len(errors) > 1)}):\n{listing}")
    _fill_dependent_defaults(resolved)
    return ResolvedConfig(resolved)


# --------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[str, Any]:
    """'training.num_epochs=3' -> ('training.num_epochs', 3); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected section.key=value, e.g. --set training.num_epochs=3")
    try:
        value = load_yaml_text(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({err.problem})") from None
    return key.strip(), value


def _python_override_value(value: Any) -> Any:
    """A Python override given as YAML's ``'!pyobject dotted.path'`` text means the object, as with --set
    (plain strings stay strings: only this tag is read, so a run name like 'a: b' is not parsed)."""
    if isinstance(value, str) and value.lstrip().startswith(PYOBJECT_TAG + " "):
        return load_yaml_text(value)
    return value


def apply_overrides(config: dict, overrides: Iterable[str] | Mapping[str, Any] | None) -> dict:
    """Return a copy of ``config`` with dotted-key overrides applied; ``config`` itself is not changed.

    Args:
        config: a config (a mapping of sections); not validated here.
        overrides: ``"section.key=value"`` strings (the value read as YAML, as ``--set`` reads it) or a mapping
            ``{"section.key": value}``; None or empty: no change.

    Returns:
        The new config.

    Raises:
        ConfigError: an override string that is not ``section.key=value`` or not valid YAML, or a dotted key
            that runs through a key that is not a section.

    Example:
        >>> import QuantumGrav as QG
        >>> QG.apply_overrides({"training": {"num_epochs": 20}}, ["training.num_epochs=3"])
        {'training': {'num_epochs': 3}}
    """
    out = copy.deepcopy(config)
    if not overrides:
        return out
    if isinstance(overrides, Mapping):
        items = [(key, _python_override_value(value)) for key, value in overrides.items()]
    else:
        items = map(parse_override, overrides)
    for dotted, value in items:
        node = out
        *parents, leaf = dotted.split(".")
        for i, part in enumerate(parents):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{'.'.join(parents[: i + 1])}: cannot set '{dotted}', this key is not a section")
            node = child
        node[leaf] = value
    return out


def read_config_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        problem = "is a folder, not a file" if path.is_dir() else f"does not exist (looked in {Path.cwd()})"
        raise ConfigError(f"config file '{path}' {problem}; pass the path of a YAML config, such as "
                          "configs/train.yaml of the QuantumGrav repository")
    try:
        with path.open(encoding="utf-8") as f:
            data = yaml.load(f, _Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read it as a UTF-8 text file ({reason})") from None
    return data if data is not None else {}


def merge_configs(base: dict, extra: Mapping[str, Any]) -> dict:
    """``base`` with ``extra`` laid over it, section by section (``extra`` wins)."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_configs(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_source(source: str | Path | Mapping[str, Any] | None) -> dict:
    if source is None:
        return {}
    raw = copy.deepcopy(dict(source)) if isinstance(source, Mapping) else read_config_file(source)
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping of sections at the top level, got {_describe(raw)}")
    return raw if isinstance(source, Mapping) else cap_file_epochs(raw)


def load_config(
    source: str | Path | Mapping[str, Any] | list | tuple | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
) -> ResolvedConfig:
    """Read, override and validate a config and return it with every default filled in.

    Args:
        source: a YAML path, a dict, None (all defaults), or a list of these laid over each other in order,
            e.g. ``["configs/train_ddp.yaml", "configs/logger/wandb_ddp.yaml"]``.
        overrides: applied after merging, as in ``apply_overrides``: ``"section.key=value"`` strings or a
            mapping.

    Returns:
        The resolved config (a ``ResolvedConfig``, a dict); the trainers and launchers take it as it is.

    Raises:
        ConfigError: a missing or unreadable file, invalid YAML, a malformed override, or a value the schema
            refuses (every problem at once, each naming its key).

    Example:
        >>> import QuantumGrav as QG
        >>> config = QG.load_config("configs/train.yaml", ["training.num_epochs=3"])
        >>> config["training"]["num_epochs"]
        3
    """
    sources = source if isinstance(source, (list, tuple)) else [source]
    raw: dict = {}
    for item in sources:
        raw = merge_configs(raw, _read_source(item))
    return validate_config(apply_smoke_test(apply_overrides(raw, overrides)))


def find_unimportable(config: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(key path, dotted path) of every callable a freshly spawned process could not import."""
    found: list[tuple[str, str]] = []
    if isinstance(config, dict):
        for key, value in config.items():
            found += find_unimportable(value, f"{prefix}{key}.")
    elif isinstance(config, (list, tuple)):
        for i, value in enumerate(config):
            found += find_unimportable(value, f"{prefix}{i}.")
    elif _is_pyobject(config):
        path = pyobject_path(config)
        if config.__module__ == "__main__" or "<locals>" in config.__qualname__ or "<lambda>" in path:
            found.append((prefix.rstrip("."), path))
    return found
