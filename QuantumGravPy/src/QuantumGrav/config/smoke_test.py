"""The smoke-test switch: ``QUANTUMGRAV_SMOKE_TEST=1`` runs any command, end to end, on a tiny data set.

As Lightning's ``fast_dev_run``: the same code path (generation and cache, model, launchers, checkpoints,
resume, test, baselines) in seconds. The data shrink to ``SMOKE_DATA`` (one batch per process per epoch), an
``n_min``/``n_max`` that the command sets itself too (the documented commands at N = 256 or 1,024 must stay seconds
under the documentation test); the warning then names them and the one way to smoke-test one's own N: without the
switch, with few sets and epochs set explicitly. ``training.num_epochs``
and a study's ``tune.trials`` read from a config *file* are capped at ``SMOKE_EPOCHS`` and ``SMOKE_TRIALS``, while a
number given explicitly (``--set``, a Python override, papermill's ``-p``) is kept, so a command that asks for N
epochs trains N. The documentation test and the notebooks (``QuantumGrav.notebook_helpers``) run under it.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable

import torch

SMOKE_TEST_ENV = "QUANTUMGRAV_SMOKE_TEST"
# 40 small sets: 28 train, 6 validation, 6 test with the default split, so one training batch per epoch.
SMOKE_DATA = {"num_samples": 40, "n_min": 8, "n_max": 12}
# QuantumGrav.jl's nine kinds (data.kwargs of QuantumGrav.data.kinds.KindsDataset): 4 small sets of each kind. A
# layered set needs more elements than its up to 20 layers, so they are not as small as the generator's.
SMOKE_KINDS = {"num_per_kind": 4, "n_min": 24, "n_max": 32}
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


def apply_smoke_test(raw: dict[str, Any], explicit: Iterable[str] = ()) -> dict[str, Any]:
    """``raw`` (an unvalidated config, overrides applied) with its data set shrunk when the switch is on; the
    warning names the element counts that ``explicit`` (the dotted keys the command overrides) set and the switch
    shrank (``data.n_min``, ``data.n_max``, ``data.kwargs.n_min``, ``data.kwargs.n_max``).

    Only integers are shrunk (never grown); anything else is left for validation to report."""
    if not smoke_test_enabled():
        return raw
    data = raw.get("data") or {}
    if not isinstance(data, dict):
        return raw  # validation reports it
    explicit = set(explicit)
    shrunk_given = _shrunk_given(data, SMOKE_DATA, "data.", explicit)
    data = _shrunk(data, SMOKE_DATA)
    if isinstance(data.get("kwargs"), dict) and "num_per_kind" in data["kwargs"]:
        shrunk_given = _shrunk_given(data["kwargs"], SMOKE_KINDS, "data.kwargs.", explicit)
        data["kwargs"] = _defects_that_fit(_shrunk(data["kwargs"], SMOKE_KINDS))
    warn_smoke_data(data, shrunk_given)
    return {**raw, "data": data}


def _shrunk_given(values: dict[str, Any], smallest: dict[str, int], prefix: str, explicit: set[str]) -> list[str]:
    """``key=value`` of each element count (``n_min``, ``n_max``) that the command sets above the smoke test's."""
    return [f"{prefix}{key}={values[key]}" for key in ("n_min", "n_max")
            if f"{prefix}{key}" in explicit and _is_int(values.get(key)) and values[key] > smallest[key]]


def _shrunk(values: dict[str, Any], smallest: dict[str, int]) -> dict[str, Any]:
    """``values`` with each integer of ``smallest``'s keys at most its value there, and n_max still >= n_min."""
    values = dict(values)
    for key, small in smallest.items():
        given = values.get(key, small)
        values[key] = min(given, small) if _is_int(given) else given
    if _is_int(values["n_min"]) and _is_int(values["n_max"]):
        values["n_max"] = max(values["n_min"], values["n_max"])
    return values


def _defects_that_fit(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kinds' exact defect sizes that the shrunk sets can hold (a block leaves one element of n_min, changes
    are at most its pairs); where none can, the largest that can. Anything not a list of integers is left for
    validation to report."""
    n_min = kwargs["n_min"]
    if not _is_int(n_min):
        return kwargs
    kwargs = dict(kwargs)
    for key, most in (("block_sizes", n_min - 1), ("changed_relations", n_min * (n_min - 1) // 2)):
        sizes = kwargs.get(key)
        if isinstance(sizes, list) and sizes and all(_is_int(size) for size in sizes):
            kwargs[key] = [size for size in sizes if size <= most] or [most]
    return kwargs


def warn_smoke_data(data: dict[str, Any], shrunk_given: Iterable[str] = ()) -> None:
    """Say once per process, on rank 0, that the switch is on, with the data sizes it leads to, and which element
    counts of the command it shrank (``shrunk_given``) with how to run at them. (The standard library's logger of
    "QuantumGrav.smoke_test": config/ sits below the package's logging helpers.)"""
    kinds = data.get("kwargs") if isinstance(data.get("kwargs"), dict) and "num_per_kind" in data["kwargs"] else None
    sizes = (f"data.kwargs.num_per_kind={kinds['num_per_kind']}, n_min={kinds['n_min']}, n_max={kinds['n_max']}"
             if kinds else f"data.num_samples={data['num_samples']}, n_min={data['n_min']}, n_max={data['n_max']}")
    shrunk_given = list(shrunk_given)
    own = (f"; the command's {' and '.join(shrunk_given)} are shrunk too: to smoke-test your own N, unset the switch "
           f"and set few sets (data.num_samples, data.kwargs.num_per_kind) and training.num_epochs instead"
           if shrunk_given else "")
    message = (f"{SMOKE_TEST_ENV} is set: a smoke test on a tiny data set ({sizes}; at most {SMOKE_EPOCHS} epochs "
               f"unless num_epochs is set explicitly{own}); unset it for real results")
    if message not in _warned and _rank() == 0:
        _warned.add(message)
        logging.getLogger("QuantumGrav.smoke_test").warning(message)


_warned: set[str] = set()


def _rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
