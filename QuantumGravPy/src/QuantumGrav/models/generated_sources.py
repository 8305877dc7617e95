"""PyG renders each message-passing class's ``propagate`` (and ``edge_updater``) from a template into a temporary
file, once per class per process, and never removes it (``torch_geometric.template.module_from_template``, PyG 2.5
to 2.8). A test suite, a sweep or a job's ranks and evaluations each leave one file per conv class in the
temporary folder, and with bytecode caching on (Python's default) its ``.pyc`` in the folder's ``__pycache__`` too;
on a cluster node's ``/tmp`` they add up run after run. They are read only while their process lives (tracebacks,
``inspect``), so the files this process loaded are removed when it exits, with their ``.pyc``.

Registered by the modules that build PyG layers (``sparse_attention``, which ``gnn`` imports, and
``upstream_gcn``). A forked worker leaves through ``os._exit`` and so removes nothing of its parent's."""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys

GENERATED_SUFFIXES = ("_propagate", "_edge_updater")  # the module names PyG gives its rendered templates


def generated_files() -> list[str]:
    """The files of the rendered PyG modules loaded in this process: a module named ``<class>_propagate`` whose
    file is ``<class>_propagate_<random>.py`` (a ``NamedTemporaryFile``), never an installed module."""
    files = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not (name.endswith(GENERATED_SUFFIXES) and path):
            continue
        base = os.path.basename(path)
        if base.startswith(f"{name}_") and base.endswith(".py"):  # an installed module's file is <name>.py
            files.append(path)
    return files


def remove_generated_files() -> None:
    for path in generated_files():
        cached = importlib.util.cache_from_source(path)
        for file in (path, cached):
            try:
                os.remove(file)
            except OSError:  # removed already (another hook, a cleaned /tmp) or never written: nothing to do
                pass
        try:
            os.rmdir(os.path.dirname(cached))  # the shared __pycache__, only once no other process keeps a file there
        except OSError:
            pass


atexit.register(remove_generated_files)
