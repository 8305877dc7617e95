"""What a config may name: every ``!pyobject`` key has a role (``ROLES``), checked in validation before
anything named is called, so ``data.type: !pyobject subprocess.run`` is refused and never runs.

Reading a config imports the modules it names, as ``import`` would: load only configs you trust. A loss may be
a plain function when its author says so: a function of ``torch.nn.functional``, one marked with
``@QuantumGrav.loss_function``, or one of the user's own code (a module outside the Python installation), since
the standard library and installed packages hold what a hostile config would reach for (``subprocess.run``,
``os.system``); an allow-list in the config would be written by whoever writes the config.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, TypeVar

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

Fn = TypeVar("Fn", bound=Callable[..., Any])

_REGISTERED: dict[str, set[Callable[..., Any]]] = {"dataset": set(), "loss": set()}
_INSTALLED_FOLDER_NAMES = {"site-packages", "dist-packages"}
OWN_CODE = ""  # where a function of the user's own code comes from: nothing to add to the message


def _register(kind: str, decorator: str, func: Fn) -> Fn:
    if not inspect.isroutine(func):
        raise TypeError(f"@QuantumGrav.{decorator} marks a function, got {func!r}")
    _REGISTERED[kind].add(func)
    return func


def dataset_factory(func: Fn) -> Fn:
    """Mark ``func`` as a dataset factory, which ``data.type`` in a config may then name.

    It is called as ``func(**data.kwargs)`` on every rank (rank 0 first) and returns the dataset (a PyG
    ``Dataset`` or a sequence of ``Data``). A dataset class needs no mark: any subclass of
    ``torch.utils.data.Dataset`` (PyG's ``Dataset`` is one) may be named.

    Args:
        func: the factory function.

    Returns:
        ``func`` itself, marked (use it as a decorator).

    Example:
        >>> import QuantumGrav as QG
        >>> @QG.dataset_factory
        ... def my_sets(num_samples=100):
        ...     return []  # a list of torch_geometric.data.Data
        >>> # in the config: data: {type: !pyobject my_module.my_sets, kwargs: {num_samples: 500}}
    """
    return _register("dataset", "dataset_factory", func)


def loss_function(func: Fn) -> Fn:
    """Mark ``func`` as a loss, which ``criterion`` in a config may then name from an installed package.

    It is called as ``func(outputs, target)``. Functions of your own modules and of
    ``torch.nn.functional`` need no mark.

    Args:
        func: the loss function.

    Returns:
        ``func`` itself, marked (use it as a decorator).
    """
    return _register("loss", "loss_function", func)


# --------------------------------------------------------------------------- where a function comes from
@lru_cache(maxsize=1)
def _standard_library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if paths.get(key)})


def _is_installed_file(file: str) -> bool:
    real = os.path.realpath(file)
    parts = set(real.split(os.sep)[:-1])
    return bool(parts & _INSTALLED_FOLDER_NAMES) or any(
        real.startswith(folder + os.sep) for folder in _standard_library_folders())


def function_origin(func: Callable[..., Any]) -> str:
    """Where ``func`` is defined: OWN_CODE for the user's own code, else a phrase for a refusal such as
    'the standard library'. The module that *defines* it counts (``__module__``), not the path named:
    ``from subprocess import run`` in a module of one's own does not make ``run`` one's own."""
    module_name = getattr(func, "__module__", None) or ""
    top = module_name.partition(".")[0]
    if module_name == "__main__":
        return OWN_CODE
    if top in sys.stdlib_module_names:
        return "the standard library"
    if top == "QuantumGrav":
        return "QuantumGrav itself"
    file = getattr(sys.modules.get(module_name), "__file__", None)
    if not file:
        return f"module {module_name or '?'} (no source file)"
    if _is_installed_file(file):
        return f"the installed package {top}"
    return OWN_CODE


# --------------------------------------------------------------------------- roles
def _subclass_of(*bases: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, type) and issubclass(value, bases)


def _is_dataset(value: Any) -> bool:
    return _subclass_of(torch.utils.data.Dataset)(value) or value in _REGISTERED["dataset"]


def _is_scheduler(value: Any) -> bool:
    return _subclass_of(LRScheduler, ReduceLROnPlateau)(value)


def _is_loss(value: Any) -> bool:
    if isinstance(value, type):
        return issubclass(value, torch.nn.Module)
    return (getattr(value, "__module__", None) == "torch.nn.functional" or value in _REGISTERED["loss"]
            or function_origin(value) == OWN_CODE)


def _loss_refusal(value: Any) -> str:
    if isinstance(value, type):
        return " (a class that is not a torch.nn.Module)"
    return f" (a function of {function_origin(value)})"


def _is_callback(value: Any) -> bool:
    # A subclass of QuantumGrav's Callback, told by the qualified names in its MRO: config/ imports nothing
    # above it, and the protocol lives in QuantumGrav.callbacks (a module or a package).
    return isinstance(value, type) and any(
        base.__qualname__ == "Callback" and (base.__module__ + ".").startswith("QuantumGrav.callbacks.")
        for base in value.__mro__)


@dataclass(frozen=True)
class Role:
    """What a ``!pyobject`` key may name. ``admits(value)``; a refusal says ``expected`` and
    ``explain(value)``."""

    expected: str
    admits: Callable[[Any], bool]
    explain: Callable[[Any], str] = lambda value: ""


ROLES = {
    "dataset": Role("a dataset class (a subclass of torch_geometric.data.Dataset or torch.utils.data.Dataset) "
                    "or a dataset factory marked with @QuantumGrav.dataset_factory", _is_dataset),
    "model": Role("a model class (a subclass of torch.nn.Module)", _subclass_of(torch.nn.Module)),
    "convolution": Role("a message-passing layer class (a subclass of torch.nn.Module, such as "
                        "torch_geometric.nn.GraphConv)", _subclass_of(torch.nn.Module)),
    "optimizer": Role("an optimizer class (a subclass of torch.optim.Optimizer)",
                      _subclass_of(torch.optim.Optimizer)),
    "scheduler": Role("a scheduler class (a subclass of torch.optim.lr_scheduler.LRScheduler or "
                      "ReduceLROnPlateau)", _is_scheduler),
    "loss": Role("a loss (a torch.nn.Module class, a function of torch.nn.functional, a function of your own "
                 "code, or one marked with @QuantumGrav.loss_function)", _is_loss, _loss_refusal),
    "callback": Role("a callback class (a subclass of QuantumGrav.Callback)", _is_callback),
}
