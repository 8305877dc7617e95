"""PyG renders each message-passing class's ``propagate`` (and ``edge_updater``) from a template into a temporary
file, once per class per process, and never removes it (``torch_geometric.template.module_from_template``, PyG 2.5
to 2.8). A test suite, a sweep or a job's ranks and evaluations each leave one file per conv class in the
temporary folder, and on a cluster node's ``/tmp`` they add up run after run. The file is read only while its
process lives (tracebacks, ``inspect``), so the files this process loaded are removed when it exits.

Registered by the modules that build PyG layers (``sparse_attention``, which ``gnn`` imports, and ``upstream_gcn``). A forked worker leaves through ``os._exit`` and so removes
nothing of its parent's."""

from __future__ import annotations

import atexit
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
        if base.startswith(f"{name}_") and base.endswith(".py") and "site-packages" not in path:
            files.append(path)
    return files


def remove_generated_files() -> None:
    for path in generated_files():
        try:
            os.remove(path)
        except OSError:  # removed already (another hook, a cleaned /tmp) or not ours to remove: nothing to do
            pass


atexit.register(remove_generated_files)
