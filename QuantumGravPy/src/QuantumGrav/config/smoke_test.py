"""The smoke-test switch: ``QUANTUMGRAV_SMOKE_TEST=1`` runs any command on a tiny generated data set.

In the spirit of Lightning's ``fast_dev_run``: the same code path end to end (data generation and
cache, model, every launcher, checkpoints, resume, test and baseline), only smaller, so that a run
takes seconds:

- the data set shrinks to a few small causal sets (``SMOKE_DATA``), so every epoch is a single batch
  per process, whatever the config or the overrides say;
- ``training.num_epochs`` read from a config *file* is capped at ``SMOKE_EPOCHS``; a number given
  explicitly (``--set training.num_epochs=5``, a Python override, papermill's ``-p num_epochs 5``)
  is kept, so a command that asks for N epochs, or resumes a run to N, trains N;
- a study's ``tune.trials`` read from a config file is capped at ``SMOKE_TRIALS`` the same way
  (``--trials N`` or ``--set tune.trials=N`` is kept).

The documentation test runs every documented command with it; a user can check a command the
same way before a long run. The tutorial notebooks obey the same switch (``shrink_for_smoke_test``, called
right after their ``parameters`` cell): their parameters hold full-size values, and the switch shrinks them
to their test sizes; ``print_run_header`` prints the line that says which sizes a notebook's run has.
"""

from __future__ import annotations

import os
from typing import Any

SMOKE_TEST_ENV = "QUANTUMGRAV_SMOKE_TEST"
# 40 small sets: 28 train, 6 validation, 6 test with the default split, so one training batch per epoch.
SMOKE_DATA = {"num_samples": 40, "n_min": 8, "n_max": 12}
SMOKE_EPOCHS = 2
SMOKE_TRIALS = 2


def smoke_test_enabled() -> bool:
    return os.environ.get(SMOKE_TEST_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _cap_from_file(raw: dict[str, Any], section: str, key: str, cap: int) -> dict[str, Any]:
    """``raw`` with its ``section.key`` capped at ``cap`` when the switch is on."""
    values = raw.get(section)
    value = values.get(key) if isinstance(values, dict) else None
    if not smoke_test_enabled() or not _is_int(value) or value <= cap:
        return raw
    return {**raw, section: {**values, key: cap}}


def cap_file_epochs(raw: dict[str, Any]) -> dict[str, Any]:
    """A config read from a file, with its ``training.num_epochs`` capped when the switch is on."""
    return _cap_from_file(raw, "training", "num_epochs", SMOKE_EPOCHS)


def cap_file_trials(raw: dict[str, Any]) -> dict[str, Any]:
    """A study config read from a file, with its ``tune.trials`` capped when the switch is on."""
    return _cap_from_file(raw, "tune", "trials", SMOKE_TRIALS)


def apply_smoke_test(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (an unvalidated config, overrides applied) with its data set shrunk when the switch is on.

    Only integers are shrunk (never grown); anything else is left for validation to report."""
    if not smoke_test_enabled():
        return raw
    data = raw.get("data") or {}
    if not isinstance(data, dict):
        return raw  # validation reports it
    data = dict(data)
    for key, small in SMOKE_DATA.items():
        given = data.get(key, small)
        data[key] = min(given, small) if _is_int(given) else given
    if _is_int(data["n_min"]) and _is_int(data["n_max"]):
        data["n_max"] = max(data["n_min"], data["n_max"])
    _warn_smoke_data(data)
    return {**raw, "data": data}


def _warn_smoke_data(data: dict[str, Any]) -> None:
    """Say once per process (rank 0) that the switch is on, with the data sizes it leads to."""
    from ..logging_utils import get_logger, rank_zero_warn

    rank_zero_warn(get_logger("smoke_test"), f"{SMOKE_TEST_ENV} is set: a smoke test on a tiny data set "
                                             f"(data.num_samples={data['num_samples']}, n_min={data['n_min']}, "
                                             f"n_max={data['n_max']}; at most {SMOKE_EPOCHS} epochs unless "
                                             "num_epochs is set explicitly); unset it for real results")


PAPERMILL_PARAMETERS_COMMENT = "# Parameters"  # the first line of the cell papermill injects for -p values


def shrink_for_smoke_test(namespace: dict[str, Any], **test_values: Any) -> dict[str, tuple[Any, Any]]:
    """A notebook's test mode: under ``QUANTUMGRAV_SMOKE_TEST=1``, lower its parameters to their test values.

    A notebook's ``parameters`` cell holds full-size values; its next cell calls this with ``globals()``
    and the test value of each parameter that sets the notebook's size (data, epochs, trials, ...). With
    the switch off it does nothing and prints nothing. With it on, every named parameter larger than its
    test value is set to it (a value is never raised), except parameters given explicitly to papermill
    (``-p name value``), which are kept: a run asked for them. The data sizes ``num_samples``, ``n_min``
    and ``n_max`` are the exception to the exception: they never exceed ``SMOKE_DATA``, because every
    config that ``load_config`` reads under the switch is shrunk to it anyway, and the notebook's
    variables must agree with the data it trains on. Prints one line naming what changed.

    Args:
        namespace: the notebook's globals (in Jupyter, papermill and nbval, IPython's namespace, whose
            input history ``In`` tells which parameters papermill injected).
        **test_values: parameter name -> its test value; data sizes at most ``SMOKE_DATA``'s.

    Returns:
        What changed: name -> (the value before, the value now); empty with the switch off.

    Raises:
        ValueError: a name that is not a parameter of ``namespace``, or a data size above ``SMOKE_DATA``.

    Example:
        >>> import QuantumGrav as QG
        >>> parameters = {"num_samples": 2000, "num_epochs": 40}
        >>> QG.shrink_for_smoke_test(parameters, num_samples=40, num_epochs=3)  # switch off: no change
        {}
    """
    unknown = sorted(set(test_values) - set(namespace))
    too_large = {name: value for name, value in test_values.items()
                 if name in SMOKE_DATA and not value <= SMOKE_DATA[name]}
    if unknown or too_large:
        raise ValueError(f"shrink_for_smoke_test: no parameter named {unknown}" if unknown else
                         f"shrink_for_smoke_test: the test data sizes {too_large} exceed SMOKE_DATA {SMOKE_DATA}, "
                         "to which load_config shrinks every config under the switch")
    if not smoke_test_enabled():
        return {}
    explicit = _papermill_parameters(namespace)
    changed = {}
    for name, small in test_values.items():
        given = namespace[name]
        target = min(given, SMOKE_DATA[name]) if name in SMOKE_DATA else given if name in explicit else min(given, small)
        if target != given:
            namespace[name] = target
            changed[name] = (given, target)
    if changed:
        print(f"test mode ({SMOKE_TEST_ENV}=1): " + ", ".join(f"{name} {before} -> {after}"
                                                              for name, (before, after) in changed.items()))
    if all(name in namespace for name in SMOKE_DATA):
        _warn_smoke_data({name: namespace[name] for name in SMOKE_DATA})  # said here, not in a later cell
    return changed


def _papermill_parameters(namespace: dict[str, Any]) -> set[str]:
    """The names assigned in the cells papermill injected, read from IPython's input history ``In``."""
    import ast

    names: set[str] = set()
    for source in namespace.get("In", []):
        if isinstance(source, str) and source.startswith(PAPERMILL_PARAMETERS_COMMENT):
            names |= {target.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
                      for target in node.targets if isinstance(target, ast.Name)}
    return names


def print_run_header(data: str, epochs: int | None, processes: int) -> None:
    """Print a notebook's first output: the size of this run, marked when it is a test-mode run.

    ``scripts/execute_notebooks.sh`` turns the line of a full-size run into the header of the stored
    outputs ("stored outputs: ..., N min on C CPU cores"), with the minutes that run took.

    Example:
        >>> import QuantumGrav as QG
        >>> QG.print_run_header("2,000 causal sets of 64-128 elements", epochs=40, processes=1)
        this run: 2,000 causal sets of 64-128 elements, up to 40 epochs, 1 process
    """
    parts = [data] + ([f"up to {epochs} epoch{'s' * (epochs != 1)}"] if epochs is not None else [])
    line = "this run: " + ", ".join(parts + [f"{processes} process{'es' * (processes != 1)}"])
    if smoke_test_enabled():
        line += f" (test mode: {SMOKE_TEST_ENV}=1; unset it for real results)"
    print(line)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
