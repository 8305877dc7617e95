"""What a config may name: every ``!pyobject`` key has a role, checked before anything named is called.

A config names Python objects by their dotted path (``optimizer_type: !pyobject torch.optim.AdamW``).
Reading it imports their modules, as ``import`` would: a config can name only what the environment
holds, but importing a module runs its code, so load only configs and run directories you trust.
What the library then *calls* is bound by the key's role: validation refuses a value outside its role
with one line naming the key, the role and what was given, before anything named is called. A config
that names ``subprocess.run`` as ``data.type`` is refused; it is never called.

The roles (``ROLES``): a dataset class or registered dataset factory (``data.type``), a model class
(``model.type``), a message-passing layer class (``model.conv``), an optimizer class, a scheduler class,
a loss (``criterion``) and a callback class (``callbacks[].type``). A class of the right role can still do
anything its code does (and call what its arguments name): the check bounds what a config can reach, it
does not vouch for the code.

A loss may be a plain function, as losses have always been. Which functions count as losses, when their
arguments are ``(outputs, target)`` like anybody's? Those whose author says so: the functions of
``torch.nn.functional``, those registered with ``@QuantumGrav.loss_function``, and the functions of the
user's own code, i.e. a module that lives outside the Python installation (not the standard library, not
site-packages or dist-packages, not QuantumGrav itself): a script's ``__main__``, a module next to the
notebook, a project on ``PYTHONPATH`` or installed in editable mode. Code the user wrote is code the user
runs anyway; the standard library and installed packages hold the functions a hostile config would reach
for (``subprocess.run``, ``os.system``, ``shutil.rmtree``, ``builtins.eval``). An allow-list in the config
would not do: whoever writes the config writes the list.
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
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

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
    from ..callbacks.base import Callback

    return _subclass_of(Callback)(value)


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
