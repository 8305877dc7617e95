"""docs/configuration.md, generated from the config sections: ``python -m QuantumGrav.config.reference > docs/configuration.md``.

Each key's explanation is the ``doc`` of its ``setting`` in the section that declares it (``config/sections/``,
gathered by ``layout``); this module holds what belongs to no single key
(how configs are read, each section's introduction) and writes plain CommonMark (a heading per section, a
list item per key, no raw HTML), so that the file reads the same on GitHub and in the Sphinx site.
tests/test_config.py fails when the file is out of date or misses a key of the schema.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Iterator, Mapping

import yaml

from .checks import Field
from .layout import schema
from .yaml_io import is_pyobject, pyobject_path

COMMAND = "python -m QuantumGrav.config.reference > docs/configuration.md"



def _default_job() -> str:
    """The default job in words, read from the schema (so that the sentence cannot outlive a change of it)."""
    spec = schema()
    model, training = spec["model"], spec["training"]
    widths = model["hidden_channels"].default
    shape = f"{len(widths)} x {widths[0]}" if len(set(widths)) == 1 else " -> ".join(map(str, widths))
    directions = "both ways" if model["directions"].default == "both" else "from past to future"
    invariants = ", the order invariants in the head" if model["graph_features"].default else ""
    schedule = training["scheduler_type"].default
    schedule = f"a {schedule.__name__} schedule" if schedule else "a constant learning rate"
    return (f"`{model['conv'].default.__name__}` layers of {shape} channels passing messages {directions}{invariants}, "
            f"{training['optimizer_type'].default.__name__} at lr {training['optimizer_kwargs'].default['lr']:g} "
            f"with {schedule} over {training['num_epochs'].default} epochs, early stopping after "
            f"{spec['early_stopping']['patience'].default} epochs without improvement")


def introduction() -> str:
    return f"""\
# Configuration reference

This file is generated from the config sections in `QuantumGravPy/src/QuantumGrav/config/` (each key's
`setting` in the module of `sections/` that declares it) by
`{COMMAND}`: change a key's explanation there (its `doc`), not
here; a test fails when this file is out of date. The keys of `training` are listed by concern: the loop, the
training loader, the optimizer, the schedule, the run directory and checkpoints, memory, logging.

In Python, `QG.load_config(...)` returns the config as a dict (`config["training"]["num_epochs"]`), and
`config.sections` gives the same values as one typed, frozen section per component (`config.sections.loop.num_epochs`,
`config.sections.optimizer.lr`), which is what the library's components take. The sections group the keys by
concern in code; the YAML keeps its layout, so every config, `--set` override and run directory's `config.yaml`
written before reads the same.

A config is YAML read with `yaml.load(f, QG.get_loader())` (or `QG.load_config(path)`, which also
validates it and fills every default). `!pyobject dotted.path` stands for a Python object (a class or a
function, e.g. `!pyobject torch.optim.AdamW`); every other value is plain YAML. Every key is optional.

## The defaults are the default job

A config that leaves a key out gets its default below, and the defaults are the values of the default
job, `configs/train.yaml` (`make train`): the model, the optimizer, the learning-rate schedule and early
stopping of the hyperparameter study's best configuration (docs/default_model.md).
A config of your own that leaves out `model:` therefore trains that model: {_default_job()}.
For a faster, smaller model set the `model` keys you want (docs/training.md gives the overrides of the previous default),
and set `model.conv_kwargs` whenever you change `model.conv` (the default's are `TransformerConv`'s).
A test keeps `configs/train.yaml` equal to these defaults, and `configs/train_ddp.yaml` equal to
`configs/train.yaml` except for its `parallel:` section.

"""


def reading_configs() -> str:
    return """\
## Reading, overriding and merging configs

- **Overrides**: `--set training.num_epochs=3` on the command line (the value is YAML), or
  `QG.load_config(path, {"training.num_epochs": 3})` / a list of `"key=value"` strings in Python and papermill.
  In a Python mapping a class or function is given as itself or, as with `--set`, as the text
  `"!pyobject package.module.name"` (e.g. `{"criterion": "!pyobject torch.nn.functional.cross_entropy"}`).
  A key whose value is a mapping (such as `training.optimizer_kwargs`) is replaced as a whole.
- **Smoke test**: with `QUANTUMGRAV_SMOKE_TEST=1` in the environment, every config is read with a tiny
  data set (`data.num_samples` at most 40, `n_min`/`n_max` at most 8/12) and `training.num_epochs`
  from a config file capped at 2 (an explicit override is kept): any command then runs in seconds.
- **Partial configs** are laid over each other in order: `--merge configs/logger/wandb_ddp.yaml`, or
  `QG.load_config(["configs/train_ddp.yaml", "configs/logger/wandb_ddp.yaml"])`.
- **Validated once**, where the config enters: the CLI, `QG.launch`, `QG.Trainer`/`QG.TrainerDDP` given a
  path or a plain dict. `QG.load_config` returns a `ResolvedConfig` (a dict) that the library's components
  trust as it is; one edited after loading (`config["training"]["num_epochs"] = 2`) is validated again
  where it enters next, so an edit can never bypass the checks.
- **Errors** name the key path and what was expected, all problems at once, e.g.
  `training.batch_size: expected an integer >= 1, got 0` or
  `training.batch_sise: unknown key; did you mean 'batch_size'?`. The CLI prints them without a
  traceback and exits with code 2; nothing is written for an invalid config.
- **Constructors named in the config** (optimizer, scheduler, model, convolution, a criterion class) are
  called with the configured arguments before anything is written; arguments they reject are reported under
  the key that holds them (e.g. `training.optimizer_kwargs: AdamW rejects the configured arguments: ...`).
- **Trust**: a config file and a run directory (its `config.yaml`, and the config in its checkpoints that
  a resume reads) can make Python import any module of the environment, and importing a module runs its
  code, so load only configs and run directories you trust. Every `!pyobject` key has a role that is checked
  in validation, before anything is called: nothing a config names is called unless it has its key's role
  (each key below says which), so `data.type: !pyobject subprocess.run` is refused (exit code 2) and never
  runs; the checks do not prevent imports, and a class of the right role can still do anything its code
  does (and call what its arguments name). A value outside its role is one error naming the key, the role
  and what was given, e.g. `data.type: expected a dataset class (...) or a dataset factory marked with
  @QuantumGrav.dataset_factory, got !pyobject subprocess.run`. A loss (`criterion`) is called only if it is
  your own code (a module outside the Python installation: a script's or notebook's \\_\\_main\\_\\_, a `.py` file
  next to the notebook, a project on `PYTHONPATH` or installed in editable mode) or is marked with
  `@QuantumGrav.loss_function`: the rule follows whoever wrote the function, as a config cannot (an allow-list
  in the config would be written by whoever writes the config, while the functions a hostile config would
  reach for, such as `subprocess.run`, `os.system` or `builtins.eval`, are all of the standard library or
  installed packages). Wrap another package's loss (say `torchvision.ops.sigmoid_focal_loss`) in a function
  of your own module, or mark it where it is defined.
- **A run's `config.yaml`** is the resolved config (defaults filled, `resume` and `run_name` cleared)
  plus a `derived` section (effective batch size, scaled LR and warmup); `derived` is recomputed and
  ignored when the file is loaded again, so `--config <run dir>/config.yaml` repeats the run in a new
  directory, and `--config <run dir>/config.yaml --resume <run dir>` continues it (`training.resume`).
"""

# What belongs to a section rather than to one of its keys; one entry per top-level key of the schema
# (tests/test_config.py checks that none is missing).
SECTIONS = {
    "training": "How the model is trained: optimizer, learning-rate schedule, batches, precision, checkpoints "
                "and logging. Batch sizes are per process: the effective batch is batch_size x processes x "
                "accumulation_steps.",
    "model": "The built-in QuantumGrav.models.gnn.GNNClassifier (message passing, per-graph pooling, an MLP head), or "
             "your own model.type. The defaults are the default job's model.",
    "validation": "The validation split's loader, evaluated after every epoch; the metrics are exact under DDP "
                  "(sums and counts are reduced across ranks, never per-rank means).",
    "testing": "The test split's loader, evaluated once after training.",
    "task": "task.type fixes the loss, the model's output width and the metrics; early_stopping.metric may be "
            "any val_<metric> the task reports.",
    "early_stopping": "Ends the run when the metric has stopped improving; every process stops at the same "
                      "epoch, and the state is in the checkpoints.",
    "criterion": "The loss, a top-level key.",
    "data": "The built-in generator's causal sets (cached under data.root), or your own dataset (data.type).",
    "callbacks": "Your callbacks, a top-level key.",
    "parallel": "Distributed data-parallel training: processes, rendezvous and timeouts.",
    "logger": "logger.wandb is absent by default (no W&B); configs/logger/wandb_ddp.yaml switches it on.",
}

# What CommonMark would read as markup in plain text: backslashes, backticks, asterisks, '<' (raw HTML) and
# underscores that do not stand between two letters (``__main__``; an intraword one never emphasises).
_MARKDOWN_SPECIAL = re.compile(r"[\\`*<]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _escaped(text: str) -> str:
    """Plain text as CommonMark shows it: ``**kwargs``, ``__main__`` and ``<timestamp>`` are not markup."""
    return _MARKDOWN_SPECIAL.sub(lambda match: "\\" + match.group(0), text)


def _shown(default: Any) -> str:
    if is_pyobject(default):
        return f"!pyobject {pyobject_path(default)}"
    return yaml.safe_dump(default, default_flow_style=True, sort_keys=False).strip().removesuffix("...").strip()


def leaf_keys(spec: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Field]]:
    """(dotted key, Field) of every key of ``spec``, in the schema's order."""
    for key, item in spec.items():
        if isinstance(item, dict):
            yield from leaf_keys(item, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", item


def _key_line(path: str, field: Field) -> str:
    return f"- `{path}` (default `{_shown(field.default)}`): {_escaped(field.doc)}"


def reference_markdown() -> str:
    """The whole of docs/configuration.md."""
    parts = [introduction() + reading_configs()]
    for name, item in schema().items():
        lines = [f"## `{name}`", "", _escaped(SECTIONS[name]), ""]
        entries = leaf_keys(item, f"{name}.") if isinstance(item, dict) else [(name, item)]
        lines += [_key_line(path, field) for path, field in entries]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
