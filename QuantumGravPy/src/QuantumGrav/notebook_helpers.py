"""The tutorial notebooks' helpers: their test mode under ``QUANTUMGRAV_SMOKE_TEST=1`` (``shrink_for_smoke_test``,
called right after a notebook's ``parameters`` cell: the parameters hold full-size values, and the switch shrinks
them to their test sizes) and the line that says which sizes a notebook's run has (``print_run_header``)."""

from __future__ import annotations

import ast
from typing import Any

from .config.smoke_test import SMOKE_DATA, SMOKE_TEST_ENV, smoke_test_enabled, warn_smoke_data

PAPERMILL_PARAMETERS_COMMENT = "# Parameters"  # the first line of the cell papermill injects for -p values


def shrink_for_smoke_test(namespace: dict[str, Any], **test_values: Any) -> dict[str, tuple[Any, Any]]:
    """A notebook's test mode: under ``QUANTUMGRAV_SMOKE_TEST=1``, lower its parameters to their test values.

    A notebook's ``parameters`` cell holds full-size values; its next cell calls this with ``globals()``
    and the test value of each parameter that sets the notebook's size (data, epochs, trials, ...). With
    the switch off it does nothing and prints nothing. With it on, every named parameter larger than its
    test value is set to it (a value is never raised), except parameters given explicitly to papermill
    (``-p name value``), which are kept: a run asked for them. The data sizes ``num_samples``, ``n_min``
    and ``n_max`` are the exception to the exception: they never exceed ``SMOKE_DATA``, the size that
    ``load_config`` shrinks a config's data to under the switch, so that a notebook's test mode stays that
    small and its variables agree with the data it trains on. Prints one line naming what changed.

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
        warn_smoke_data({name: namespace[name] for name in SMOKE_DATA})  # said here, not in a later cell
    return changed


def _papermill_parameters(namespace: dict[str, Any]) -> set[str]:
    """The names assigned in the cells papermill injected, read from IPython's input history ``In``."""
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
        # The notebooks' prose describes their full-size runs: say so where a test-mode run's numbers contradict it.
        line += (f" (test mode: {SMOKE_TEST_ENV}=1: the numbers below say nothing at this size and the text "
                 "describes the full-size run; unset it for real results)")
    print(line)

